module poolkeeper.local/controlplane/openreports

go 1.26.0

// Test fixtures only: the OpenReports CRDs (config/crd) that poolkeeper writes Reports against.
require github.com/openreports/reports-api v0.2.1
