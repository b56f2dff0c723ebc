//! Wire types of the APIs Switchyard speaks. Serde only: no runtime, no I/O.

pub mod ollama;
pub mod openai;
