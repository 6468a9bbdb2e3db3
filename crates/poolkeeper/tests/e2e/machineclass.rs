//! MachineClass protection end to end.
