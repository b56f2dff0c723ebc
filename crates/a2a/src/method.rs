//! A2A's methods, by their 1.0 names, recognised from a JSON-RPC `method` (1.0's and 0.3's
//! names) or a REST request's method and path (1.0's paths, 0.3's under `/v1`). What a key may
//! call, limits, usage records and metrics all name a call by its method.

use http::Method as Verb;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    SendMessage,
    SendStreamingMessage,
    GetTask,
    ListTasks,
    CancelTask,
    SubscribeToTask,
    CreateTaskPushNotificationConfig,
    GetTaskPushNotificationConfig,
    ListTaskPushNotificationConfigs,
    DeleteTaskPushNotificationConfig,
    GetExtendedAgentCard,
}

/// (1.0 name, 0.3 name, method)
const NAMES: [(&str, &str, Method); 11] = [
    ("SendMessage", "message/send", Method::SendMessage),
    ("SendStreamingMessage", "message/stream", Method::SendStreamingMessage),
    ("GetTask", "tasks/get", Method::GetTask),
    ("ListTasks", "tasks/list", Method::ListTasks),
    ("CancelTask", "tasks/cancel", Method::CancelTask),
    ("SubscribeToTask", "tasks/resubscribe", Method::SubscribeToTask),
    ("CreateTaskPushNotificationConfig", "tasks/pushNotificationConfig/set", Method::CreateTaskPushNotificationConfig),
    ("GetTaskPushNotificationConfig", "tasks/pushNotificationConfig/get", Method::GetTaskPushNotificationConfig),
    ("ListTaskPushNotificationConfigs", "tasks/pushNotificationConfig/list", Method::ListTaskPushNotificationConfigs),
    (
        "DeleteTaskPushNotificationConfig",
        "tasks/pushNotificationConfig/delete",
        Method::DeleteTaskPushNotificationConfig,
    ),
    ("GetExtendedAgentCard", "agent/getAuthenticatedExtendedCard", Method::GetExtendedAgentCard),
];

impl Method {
    /// The 1.0 name.
    pub fn name(self) -> &'static str {
        NAMES.iter().find(|(_, _, m)| *m == self).map_or("", |(name, _, _)| name)
    }

    /// Every method, in a fixed order (for metrics).
    pub fn all() -> impl Iterator<Item = Method> {
        NAMES.iter().map(|(_, _, m)| *m)
    }

    /// A JSON-RPC `method`, in either version's name (1.0 also accepts 1.0-style names for
    /// the push-notification methods' older spelling `SetTaskPushNotificationConfig`).
    pub fn from_jsonrpc(wire: &str) -> Option<Method> {
        if wire == "SetTaskPushNotificationConfig" {
            return Some(Method::CreateTaskPushNotificationConfig);
        }
        NAMES.iter().find(|(new, old, _)| *new == wire || *old == wire).map(|(_, _, m)| *m)
    }

    /// Whether the answer is a stream of events (SSE).
    pub fn streams(self) -> bool {
        matches!(self, Method::SendStreamingMessage | Method::SubscribeToTask)
    }

    /// A REST request: its method and the task its path names. `path` is relative to the agent's
    /// REST base; 0.3's `/v1` prefix and a 1.0 tenant segment before the method's own path are
    /// allowed.
    pub fn from_rest(verb: &Verb, path: &str) -> Option<(Method, Option<String>)> {
        let path = path.trim_end_matches('/');
        let path = path.strip_prefix("/v1").filter(|p| p.starts_with('/')).unwrap_or(path);
        let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        // A tenant may come first (1.0): try the path whole, then without its first segment.
        rest(verb, &segments).or_else(|| segments.split_first().and_then(|(_, rest_of)| rest(verb, rest_of)))
    }
}

fn rest(verb: &Verb, segments: &[&str]) -> Option<(Method, Option<String>)> {
    let task = |id: &str| Some(id.to_owned());
    let m = match (verb, segments) {
        (&Verb::POST, ["message:send"]) => (Method::SendMessage, None),
        (&Verb::POST, ["message:stream"]) => (Method::SendStreamingMessage, None),
        (&Verb::GET, ["tasks"]) => (Method::ListTasks, None),
        (&Verb::GET, ["extendedAgentCard"] | ["card"]) => (Method::GetExtendedAgentCard, None),
        (&Verb::GET, ["tasks", id]) if !id.contains(':') => (Method::GetTask, task(id)),
        (&Verb::POST, ["tasks", id]) if id.ends_with(":cancel") => {
            (Method::CancelTask, task(id.trim_end_matches(":cancel")))
        }
        (&Verb::GET | &Verb::POST, ["tasks", id]) if id.ends_with(":subscribe") => {
            (Method::SubscribeToTask, task(id.trim_end_matches(":subscribe")))
        }
        (&Verb::POST, ["tasks", id, "pushNotificationConfigs"]) => (Method::CreateTaskPushNotificationConfig, task(id)),
        (&Verb::GET, ["tasks", id, "pushNotificationConfigs"]) => (Method::ListTaskPushNotificationConfigs, task(id)),
        (&Verb::GET, ["tasks", id, "pushNotificationConfigs", _]) => (Method::GetTaskPushNotificationConfig, task(id)),
        (&Verb::DELETE, ["tasks", id, "pushNotificationConfigs", _]) => {
            (Method::DeleteTaskPushNotificationConfig, task(id))
        }
        _ => return None,
    };
    Some(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_versions_names_are_one_method() {
        for (new, old, m) in NAMES {
            assert_eq!(Method::from_jsonrpc(new), Some(m));
            assert_eq!(Method::from_jsonrpc(old), Some(m));
            assert_eq!(m.name(), new);
        }
        assert_eq!(Method::from_jsonrpc("tools/call"), None);
        assert!(Method::SendStreamingMessage.streams() && !Method::SendMessage.streams());
    }

    #[test]
    fn rest_paths_are_methods() {
        let cases: [(Verb, &str, Method, Option<&str>); 9] = [
            (Verb::POST, "/message:send", Method::SendMessage, None),
            (Verb::POST, "/v1/message:stream", Method::SendStreamingMessage, None),
            (Verb::GET, "/tasks/t-1", Method::GetTask, Some("t-1")),
            (Verb::GET, "/tasks", Method::ListTasks, None),
            (Verb::POST, "/tasks/t-1:cancel", Method::CancelTask, Some("t-1")),
            (Verb::GET, "/v1/tasks/t-1:subscribe", Method::SubscribeToTask, Some("t-1")),
            (
                Verb::DELETE,
                "/tasks/t-1/pushNotificationConfigs/c",
                Method::DeleteTaskPushNotificationConfig,
                Some("t-1"),
            ),
            (Verb::GET, "/acme/tasks/t-2", Method::GetTask, Some("t-2")),
            (Verb::GET, "/extendedAgentCard", Method::GetExtendedAgentCard, None),
        ];
        for (verb, path, method, task) in cases {
            let got = Method::from_rest(&verb, path);
            assert_eq!(got, Some((method, task.map(str::to_owned))), "{verb} {path}");
        }
        assert_eq!(Method::from_rest(&Verb::GET, "/admin"), None);
        assert_eq!(Method::from_rest(&Verb::DELETE, "/tasks/t-1"), None);
    }
}
