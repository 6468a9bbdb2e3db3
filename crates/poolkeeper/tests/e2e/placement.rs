//! NodePool placement end to end.
