//! Which task an answer is about and what state it reached, from a JSON-RPC answer, a REST answer
//! or each event of a stream (SSE) — 0.3's `kind`-tagged objects (`task`, `status-update`…) and
//! 1.0's wrappers (`task`, `statusUpdate`, `artifactUpdate`, `message`) alike; and the text parts
//! of a message a client sends, for the guardrails.

use serde_json::Value;

/// The task an exchange concerned and its latest state (`working`, `completed`,
/// `input_required`, `canceled`…: lower-case, without 1.0's `TASK_STATE_` prefix).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TaskSeen {
    pub id: Option<String>,
    pub state: Option<String>,
    /// Stream events read.
    pub events: u32,
    /// SSE bytes not yet ending an event.
    pending: Vec<u8>,
}

impl TaskSeen {
    /// Read one answer or event: a JSON-RPC envelope (its `result`) or a bare object.
    pub fn observe(&mut self, value: &Value) {
        let value = value.get("result").unwrap_or(value);
        for wrapper in ["task", "statusUpdate", "artifactUpdate", "message", "status_update", "artifact_update"] {
            if let Some(inner) = value.get(wrapper).filter(|v| v.is_object()) {
                return self.observe_object(inner, wrapper == "task");
            }
        }
        let is_task = value.get("kind").and_then(Value::as_str) == Some("task")
            || (value.get("status").is_some() && value.get("taskId").is_none());
        self.observe_object(value, is_task);
    }

    fn observe_object(&mut self, value: &Value, is_task: bool) {
        let id = if is_task { value.get("id") } else { value.get("taskId") };
        if let Some(id) = id.and_then(Value::as_str) {
            self.id = Some(id.to_owned());
        }
        if let Some(state) = value.pointer("/status/state").and_then(Value::as_str) {
            self.state = Some(normal_state(state));
        }
    }

    /// Read a stream's bytes as they pass: each complete event's `data` is observed.
    pub fn push_sse(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
        while let Some(end) = event_end(&self.pending) {
            let event: Vec<u8> = self.pending.drain(..end).collect();
            let data: Vec<&[u8]> = event
                .split(|b| *b == b'\n')
                .map(|line| line.strip_suffix(b"\r").unwrap_or(line))
                .filter_map(|line| line.strip_prefix(b"data:"))
                .map(|d| d.strip_prefix(b" ").unwrap_or(d))
                .collect();
            if data.is_empty() {
                continue;
            }
            self.events += 1;
            if let Ok(value) = serde_json::from_slice::<Value>(&data.join(&b'\n')) {
                self.observe(&value);
            }
        }
        // An event never ends (no blank line): keep a bounded tail only.
        if self.pending.len() > 1 << 20 {
            self.pending.clear();
        }
    }
}

/// The end (exclusive, blank line included) of the first complete event in `buf`.
fn event_end(buf: &[u8]) -> Option<usize> {
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|i| i + 2);
    let crlf = buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4);
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// `TASK_STATE_INPUT_REQUIRED`, `input-required` → `input_required`; `cancelled` → `canceled`.
fn normal_state(state: &str) -> String {
    let lower = state.to_ascii_lowercase().replace('-', "_");
    let bare = lower.strip_prefix("task_state_").unwrap_or(&lower);
    if bare == "cancelled" {
        "canceled".to_owned()
    } else {
        bare.to_owned()
    }
}

/// The text parts of the message a call sends (`params.message.parts[].text`, or a REST body's
/// `message.parts[].text`), in order.
pub fn message_texts(params: &Value) -> Vec<String> {
    parts(params)
        .map(|parts| parts.iter().filter_map(|p| p.get("text")?.as_str().map(str::to_owned)).collect())
        .unwrap_or_default()
}

/// Put `texts` (as `message_texts` gave them, changed) back in their places.
pub fn replace_message_texts(params: &mut Value, texts: &[String]) {
    let Some(parts) = params.pointer_mut("/message/parts").and_then(Value::as_array_mut) else { return };
    let mut texts = texts.iter();
    for part in parts.iter_mut() {
        if let Some(text) = part.get_mut("text").filter(|t| t.is_string()) {
            match texts.next() {
                Some(new) => *text = Value::String(new.clone()),
                None => return,
            }
        }
    }
}

fn parts(params: &Value) -> Option<&Vec<Value>> {
    params.pointer("/message/parts")?.as_array()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tasks_are_read_from_both_versions() {
        let mut seen = TaskSeen::default();
        seen.observe(&json!({"jsonrpc": "2.0", "id": 1, "result": {"task": {"id": "t1", "status": {"state": "TASK_STATE_SUBMITTED"}}}}));
        assert_eq!((seen.id.as_deref(), seen.state.as_deref()), (Some("t1"), Some("submitted")));
        seen.observe(
            &json!({"result": {"statusUpdate": {"taskId": "t1", "status": {"state": "TASK_STATE_INPUT_REQUIRED"}}}}),
        );
        assert_eq!(seen.state.as_deref(), Some("input_required"));
        let mut old = TaskSeen::default();
        old.observe(&json!({"result": {"kind": "task", "id": "t2", "contextId": "c", "status": {"state": "working"}}}));
        old.observe(&json!({"result": {"kind": "status-update", "taskId": "t2", "status": {"state": "canceled"}, "final": true}}));
        assert_eq!((old.id.as_deref(), old.state.as_deref()), (Some("t2"), Some("canceled")));
        // A plain message answer has no task.
        let mut message = TaskSeen::default();
        message.observe(&json!({"result": {"message": {"messageId": "m", "role": "ROLE_AGENT", "parts": []}}}));
        assert_eq!(message, TaskSeen::default());
        // GetTask's bare task (REST).
        let mut rest = TaskSeen::default();
        rest.observe(&json!({"id": "t3", "status": {"state": "TASK_STATE_COMPLETED"}}));
        assert_eq!((rest.id.as_deref(), rest.state.as_deref()), (Some("t3"), Some("completed")));
    }

    #[test]
    fn stream_events_are_read_across_chunks() {
        let stream = "data: {\"result\": {\"task\": {\"id\": \"t\", \"status\": {\"state\": \"TASK_STATE_WORKING\"}}}}\n\n\
                      data: {\"result\": {\"statusUpdate\": {\"taskId\": \"t\", \"status\": {\"state\": \"TASK_STATE_COMPLETED\"}}}}\r\n\r\n";
        let mut seen = TaskSeen::default();
        for chunk in stream.as_bytes().chunks(7) {
            seen.push_sse(chunk);
        }
        assert_eq!((seen.id.as_deref(), seen.state.as_deref(), seen.events), (Some("t"), Some("completed"), 2));
    }

    #[test]
    fn text_parts_are_read_and_replaced_in_place() {
        let mut params =
            json!({"message": {"parts": [{"text": "a"}, {"data": {"x": 1}}, {"kind": "text", "text": "b"}]}});
        assert_eq!(message_texts(&params), ["a", "b"]);
        replace_message_texts(&mut params, &["A".to_owned(), "B".to_owned()]);
        assert_eq!(params["message"]["parts"][0]["text"], "A");
        assert_eq!(params["message"]["parts"][2]["text"], "B");
        assert_eq!(params["message"]["parts"][1]["data"]["x"], 1);
    }
}
