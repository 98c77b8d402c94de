//! The integration tests, one binary: each module is one area of behaviour, driving the
//! library in-process (helpers in `common` build plans directly) or the built binary.
//! `cargo test --release --test suite MODULE::` runs one area. `tests/bounded_memory.rs` is
//! a binary of its own (it says why).

mod common;

mod agentic;
mod anthropic;
mod as_sent;
mod capture;
mod carry_forward;
mod chat_templates;
mod connections;
mod crash_safe;
mod dialects;
mod endings;
mod expected_cache;
mod faults;
mod fleet;
mod golden_streams;
mod graceful_stop;
mod hostile_answers;
mod hostile_input;
mod hostile_settings;
mod house;
mod house_shape;
mod identity;
mod load_modes;
mod many_hosts;
mod papercuts;
mod parser_properties;
mod prompt_synthesis;
mod readme_commands;
mod rendezvous;
mod replay_mock;
mod results;
mod results_pages;
mod schedule;
mod secrets;
mod server_metrics;
mod server_timing;
mod sessions;
mod slurm;
mod sweep;
mod task_graphs;
mod timeouts;
mod timing_log;
mod tls;
mod tokenizer_sources;
mod trace_formats;
mod trace_input;
mod tracelab;
mod usage;
mod verdict;
mod verdict_matrix;
