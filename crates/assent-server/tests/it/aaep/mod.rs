//! The AAEP binding (Appendix B.1, chapters 5 and 6) against a real server: every event and
//! message validated against the AAEP schemas. The SSE reader and the subscribe / reply helpers
//! are in `kit.rs`; this file only mounts the subjects.

mod kit;

mod clarifications;
mod confirmations;
mod keeper;
mod quorum;
mod redacted;
mod replies;
mod stream_ends;
mod streams;
mod timeouts;
