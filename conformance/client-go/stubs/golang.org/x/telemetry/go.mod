module golang.org/x/telemetry
