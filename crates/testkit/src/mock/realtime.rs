//! A realtime echo model: the OpenAI realtime API's WebSocket (`GET /v1/realtime?model=…`). It
//! greets with `session.created`, acknowledges `session.update` and `conversation.item.create`,
//! and answers each `response.create` with a short text response (`tok0 … tok4`) ending in
//! `response.done` with its usage: 10 input and 5 output tokens.

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http::header::{CONNECTION, SEC_WEBSOCKET_ACCEPT, SEC_WEBSOCKET_KEY, SEC_WEBSOCKET_PROTOCOL, UPGRADE};
use http::{HeaderValue, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use super::body::MockBody;
use super::handlers::State;

/// Whether `req` asks for the realtime WebSocket.
pub(crate) fn is_realtime(req: &Request<Incoming>) -> bool {
    req.uri().path() == "/v1/realtime" && req.headers().contains_key(SEC_WEBSOCKET_KEY)
}

pub(crate) fn serve(state: &State, mut req: Request<Incoming>) -> Response<MockBody> {
    let Some(key) = req.headers().get(SEC_WEBSOCKET_KEY).cloned() else {
        return state.json(StatusCode::BAD_REQUEST, Bytes::from_static(b"{\"error\":\"not an upgrade\"}"));
    };
    let protocol = req
        .headers()
        .get(SEC_WEBSOCKET_PROTOCOL)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|p| p.trim() == "realtime"));
    let model =
        req.uri().query().and_then(|q| q.split('&').find_map(|p| p.strip_prefix("model="))).unwrap_or("").to_owned();
    let on_upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        let Ok(upgraded) = on_upgrade.await else { return };
        let ws = WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None).await;
        converse(ws, &model).await;
    });
    let mut resp = Response::new(MockBody::full(Bytes::new()));
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = resp.headers_mut();
    headers.insert(CONNECTION, HeaderValue::from_static("upgrade"));
    headers.insert(UPGRADE, HeaderValue::from_static("websocket"));
    if let Ok(accept) = HeaderValue::from_str(&derive_accept_key(key.as_bytes())) {
        headers.insert(SEC_WEBSOCKET_ACCEPT, accept);
    }
    if protocol {
        headers.insert(SEC_WEBSOCKET_PROTOCOL, HeaderValue::from_static("realtime"));
    }
    resp
}

async fn converse<S>(mut ws: WebSocketStream<S>, model: &str)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let session = json!({"id": "sess_mock", "object": "realtime.session", "model": model});
    let seq = std::sync::atomic::AtomicU32::new(0);
    let send = |event: Value| {
        let n = seq.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        let mut event = event;
        event["event_id"] = json!(format!("event_{n}"));
        Message::text(event.to_string())
    };
    if ws.send(send(json!({"type": "session.created", "session": session}))).await.is_err() {
        return;
    }
    while let Some(Ok(message)) = ws.next().await {
        let Message::Text(text) = message else {
            if matches!(message, Message::Close(_)) {
                break;
            }
            continue;
        };
        let event: Value = serde_json::from_str(text.as_str()).unwrap_or(Value::Null);
        let replies = match event["type"].as_str() {
            Some("session.update") => vec![json!({"type": "session.updated", "session": session})],
            Some("conversation.item.create") => {
                vec![json!({"type": "conversation.item.created", "item": event["item"].clone()})]
            }
            Some("response.create") => response(seq.load(std::sync::atomic::Ordering::Relaxed)),
            _ => vec![json!({"type": "error", "error": {"type": "invalid_request_error", "message": "unknown event"}})],
        };
        for reply in replies {
            if ws.send(send(reply)).await.is_err() {
                return;
            }
        }
    }
}

/// One response's events: created, five text deltas, done with its usage.
fn response(n: u32) -> Vec<Value> {
    let id = format!("resp_{n}");
    let mut events = vec![
        json!({"type": "response.created", "response": {"id": id, "object": "realtime.response", "status": "in_progress", "output": []}}),
    ];
    for i in 0..5 {
        events.push(json!({"type": "response.output_text.delta", "response_id": id, "item_id": "item_1",
                           "output_index": 0, "content_index": 0, "delta": format!("tok{i} ")}));
    }
    let usage = json!({"total_tokens": 15, "input_tokens": 10, "output_tokens": 5,
                       "input_token_details": {"cached_tokens": 0, "text_tokens": 10, "audio_tokens": 0},
                       "output_token_details": {"text_tokens": 5, "audio_tokens": 0}});
    events.push(
        json!({"type": "response.done", "response": {"id": id, "object": "realtime.response", "status": "completed",
                                                             "output": [], "usage": usage}}),
    );
    events
}
