//! The reaper: Grants of consumers whose heartbeat Lease stopped being renewed are deleted.
