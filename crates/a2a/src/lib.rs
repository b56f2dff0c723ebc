//! The Agent2Agent protocol (A2A) as a gateway reads it — no I/O here, only what the gateway's
//! `/a2a` proxy needs to know about each message: where an agent's card says it listens and that
//! card with the gateway's URLs in place (`card.rs`), which hosts the gateway may call
//! (`hosts.rs`), which method a call is (`method.rs`), and which task an answer or a streamed
//! event is about and in what state (`task.rs`). Both protocol versions in use are read: 0.3
//! (`message/send`, `kind`-tagged objects, a card's top-level `url`) and 1.0 (`SendMessage`,
//! ProtoJSON objects, `supportedInterfaces`).

pub mod card;
pub mod hosts;
pub mod method;
pub mod task;

pub use card::{rewrite_card, CardError, Interfaces};
pub use hosts::AllowedHosts;
pub use method::Method;
pub use task::{message_texts, replace_message_texts, TaskSeen};
