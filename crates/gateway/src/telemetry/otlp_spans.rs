//! OTLP spans written as protobuf straight from finished traces, field by field, into buffers the
//! export thread keeps: no intermediate messages and no `String` per attribute. Built through
//! `opentelemetry-proto`'s generated messages, a trace cost about 34,000 instructions, nearly half
//! of them the allocator's. The layout is trace.proto's and common.proto's; the tests decode what
//! is written with `opentelemetry-proto` and check that prost, encoding it again, writes the same
//! bytes.

use bytes::Bytes;
use prost::encoding::{encode_key, encode_varint, encoded_len_varint, WireType};

use opentelemetry_proto::tonic::common::v1::InstrumentationScope;
use opentelemetry_proto::tonic::resource::v1::Resource;

/// A value of an attribute (`AnyValue`).
#[derive(Clone, Copy)]
pub(super) enum Value<'a> {
    Str(&'a str),
    Int(i64),
    Bool(bool),
    Double(f64),
}

/// `Span.kind`.
#[derive(Clone, Copy)]
pub(super) enum Kind {
    Server = 2,
    Client = 3,
}

/// One span's fields other than its attributes.
pub(super) struct SpanHead<'a> {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub trace_state: &'a str,
    /// Empty for a root span.
    pub parent_span_id: &'a [u8],
    /// The name, in parts written one after another (`POST /v1/chat/completions`).
    pub name: [&'a str; 3],
    pub kind: Kind,
    pub start_unix_nano: u64,
    pub end_unix_nano: u64,
    pub flags: u32,
}

/// Spans of one export request, as they are written.
pub(super) struct SpanWriter {
    /// `ScopeSpans.spans` entries, each a whole span with its key and length.
    spans: Vec<u8>,
    /// The span being written (its length goes before it, so it is written here first).
    span: Vec<u8>,
    count: usize,
    /// The flags of the span being written (the last field, tag 16).
    flags: u32,
    /// `ResourceSpans.resource` and `ScopeSpans.scope`, encoded once.
    resource: Vec<u8>,
    scope: Vec<u8>,
}

impl SpanWriter {
    pub fn new(resource: &Resource, scope: &InstrumentationScope) -> SpanWriter {
        let mut encoded_resource = Vec::new();
        prost::encoding::message::encode(1, resource, &mut encoded_resource);
        let mut encoded_scope = Vec::new();
        prost::encoding::message::encode(1, scope, &mut encoded_scope);
        SpanWriter {
            spans: Vec::new(),
            span: Vec::new(),
            count: 0,
            flags: 0,
            resource: encoded_resource,
            scope: encoded_scope,
        }
    }

    /// Spans written since the last `take`.
    pub fn count(&self) -> usize {
        self.count
    }

    /// Begin a span: its fields up to the attributes.
    pub fn begin(&mut self, head: &SpanHead) {
        let out = &mut self.span;
        out.clear();
        bytes_field(out, 1, &head.trace_id);
        bytes_field(out, 2, &head.span_id);
        bytes_field(out, 3, head.trace_state.as_bytes());
        bytes_field(out, 4, head.parent_span_id);
        let name_len = head.name.iter().map(|p| p.len()).sum();
        if name_len > 0 {
            len_key(out, 5, name_len);
            for part in head.name {
                out.extend_from_slice(part.as_bytes());
            }
        }
        encode_key(6, WireType::Varint, out);
        encode_varint(head.kind as u64, out);
        fixed64_field(out, 7, head.start_unix_nano);
        fixed64_field(out, 8, head.end_unix_nano);
        self.flags = head.flags;
    }

    /// An attribute of the span begun last.
    pub fn attribute(&mut self, key: &str, value: Value) {
        let out = &mut self.span;
        let value_len = match value {
            Value::Str(s) => 1 + encoded_len_varint(s.len() as u64) + s.len(),
            Value::Int(n) => 1 + encoded_len_varint(n as u64),
            Value::Bool(_) => 2,
            Value::Double(_) => 9,
        };
        let key_value_len =
            1 + encoded_len_varint(key.len() as u64) + key.len() + 1 + encoded_len_varint(value_len as u64) + value_len;
        len_key(out, 9, key_value_len);
        len_key(out, 1, key.len());
        out.extend_from_slice(key.as_bytes());
        len_key(out, 2, value_len);
        // A oneof: written even when it holds its type's default.
        match value {
            Value::Str(s) => {
                len_key(out, 1, s.len());
                out.extend_from_slice(s.as_bytes());
            }
            Value::Bool(b) => {
                encode_key(2, WireType::Varint, out);
                out.push(u8::from(b));
            }
            Value::Int(n) => {
                encode_key(3, WireType::Varint, out);
                encode_varint(n as u64, out);
            }
            Value::Double(x) => {
                encode_key(4, WireType::SixtyFourBit, out);
                out.extend_from_slice(&x.to_le_bytes());
            }
        }
    }

    /// End the span begun last: its status (an error with its description, or unset when
    /// `error` is `None`), then its flags.
    pub fn end(&mut self, error: Option<&str>) {
        let out = &mut self.span;
        if let Some(message) = error {
            // Status { message = 2, code = 3 (STATUS_CODE_ERROR = 2) }
            let message_len =
                if message.is_empty() { 0 } else { 1 + encoded_len_varint(message.len() as u64) + message.len() };
            len_key(out, 15, message_len + 2);
            bytes_field(out, 2, message.as_bytes());
            encode_key(3, WireType::Varint, out);
            out.push(2);
        }
        if self.flags != 0 {
            encode_key(16, WireType::ThirtyTwoBit, out);
            out.extend_from_slice(&self.flags.to_le_bytes());
        }
        len_key(&mut self.spans, 2, self.span.len());
        self.spans.extend_from_slice(&self.span);
        self.count += 1;
    }

    /// The `ExportTraceServiceRequest` of the spans written so far; the writer starts over.
    pub fn take(&mut self) -> Bytes {
        let scope_spans_len = self.scope.len() + self.spans.len();
        let resource_spans_len = self.resource.len() + 1 + encoded_len_varint(scope_spans_len as u64) + scope_spans_len;
        let mut body = Vec::with_capacity(1 + encoded_len_varint(resource_spans_len as u64) + resource_spans_len);
        len_key(&mut body, 1, resource_spans_len);
        body.extend_from_slice(&self.resource);
        len_key(&mut body, 2, scope_spans_len);
        body.extend_from_slice(&self.scope);
        body.extend_from_slice(&self.spans);
        self.spans.clear();
        self.count = 0;
        Bytes::from(body)
    }
}

/// The key of a length-delimited field and its length.
fn len_key(out: &mut Vec<u8>, tag: u32, len: usize) {
    encode_key(tag, WireType::LengthDelimited, out);
    encode_varint(len as u64, out);
}

/// A `bytes` or `string` field; left out when empty, as proto3 does.
fn bytes_field(out: &mut Vec<u8>, tag: u32, value: &[u8]) {
    if !value.is_empty() {
        len_key(out, tag, value.len());
        out.extend_from_slice(value);
    }
}

/// A `fixed64` field; left out when zero.
fn fixed64_field(out: &mut Vec<u8>, tag: u32, value: u64) {
    if value != 0 {
        encode_key(tag, WireType::SixtyFourBit, out);
        out.extend_from_slice(&value.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
    use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
    use prost::Message;

    fn writer() -> SpanWriter {
        let resource = Resource {
            attributes: vec![KeyValue {
                key: "service.name".into(),
                value: Some(AnyValue { value: Some(any_value::Value::StringValue("switchyard".into())) }),
                ..Default::default()
            }],
            ..Default::default()
        };
        let scope = InstrumentationScope { name: "switchyard".into(), version: "1.0".into(), ..Default::default() };
        SpanWriter::new(&resource, &scope)
    }

    fn head<'a>(parent: &'a [u8], trace_state: &'a str, kind: Kind) -> SpanHead<'a> {
        SpanHead {
            trace_id: *b"0123456789abcdef",
            span_id: *b"spanid01",
            trace_state,
            parent_span_id: parent,
            name: ["POST", " ", "/v1/chat/completions"],
            kind,
            start_unix_nano: 1_700_000_000_000_000_000,
            end_unix_nano: 1_700_000_000_000_123_456,
            flags: 0x301,
        }
    }

    #[test]
    fn what_is_written_decodes_as_otlp_and_prost_writes_the_same_bytes() {
        let mut w = writer();
        w.begin(&head(b"", "", Kind::Server));
        w.attribute("http.request.method", Value::Str("POST"));
        w.attribute("http.response.status_code", Value::Int(200));
        w.attribute("empty", Value::Str(""));
        w.attribute("zero", Value::Int(0));
        w.attribute("negative", Value::Int(-3));
        w.attribute("gen_ai.request.stream", Value::Bool(true));
        w.attribute("off", Value::Bool(false));
        w.attribute("gen_ai.response.time_to_first_chunk", Value::Double(0.25));
        w.end(None);
        w.begin(&head(b"parent01", "vendor=1", Kind::Client));
        w.attribute("error.type", Value::Str("timeout"));
        w.end(Some("timeout"));
        w.begin(&SpanHead { name: ["", "", ""], start_unix_nano: 0, flags: 0, ..head(b"", "", Kind::Client) });
        w.end(Some(""));
        assert_eq!(w.count(), 3);
        let body = w.take();
        assert_eq!(w.count(), 0);

        let request = ExportTraceServiceRequest::decode(body.as_ref()).unwrap();
        assert_eq!(request.encode_to_vec(), body.as_ref(), "prost writes what was written");
        let scope_spans = &request.resource_spans[0].scope_spans[0];
        assert_eq!(scope_spans.scope.as_ref().unwrap().name, "switchyard");
        assert_eq!(request.resource_spans[0].resource.as_ref().unwrap().attributes[0].key, "service.name");
        let [server, client, bare] = &scope_spans.spans[..] else { panic!("three spans") };
        assert_eq!(server.name, "POST /v1/chat/completions");
        assert_eq!(server.kind, 2);
        assert_eq!(server.trace_id, b"0123456789abcdef");
        assert!(server.parent_span_id.is_empty());
        assert_eq!(server.flags, 0x301);
        assert_eq!(server.end_time_unix_nano - server.start_time_unix_nano, 123_456);
        assert!(server.status.is_none(), "unset");
        let values: Vec<_> =
            server.attributes.iter().map(|a| (a.key.as_str(), a.value.clone().unwrap().value.unwrap())).collect();
        use any_value::Value as V;
        assert_eq!(
            values,
            [
                ("http.request.method", V::StringValue("POST".into())),
                ("http.response.status_code", V::IntValue(200)),
                ("empty", V::StringValue(String::new())),
                ("zero", V::IntValue(0)),
                ("negative", V::IntValue(-3)),
                ("gen_ai.request.stream", V::BoolValue(true)),
                ("off", V::BoolValue(false)),
                ("gen_ai.response.time_to_first_chunk", V::DoubleValue(0.25)),
            ]
        );
        assert_eq!(client.kind, 3);
        assert_eq!(client.parent_span_id, b"parent01");
        assert_eq!(client.trace_state, "vendor=1");
        let status = client.status.as_ref().unwrap();
        assert_eq!((status.code, status.message.as_str()), (StatusCode::Error as i32, "timeout"));
        assert_eq!(bare.name, "");
        assert_eq!(bare.status.as_ref().unwrap().code, StatusCode::Error as i32);

        // The writer starts over after `take`, its buffers kept.
        w.begin(&head(b"", "", Kind::Server));
        w.end(None);
        let again = ExportTraceServiceRequest::decode(w.take().as_ref()).unwrap();
        assert_eq!(again.resource_spans[0].scope_spans[0].spans.len(), 1);
    }

    #[test]
    fn long_fields_take_multi_byte_lengths() {
        let mut w = writer();
        let long = "x".repeat(70_000);
        w.begin(&SpanHead { trace_state: &long, ..head(b"", "", Kind::Server) });
        for i in 0..200 {
            w.attribute("switchyard.request_id", Value::Str(&long[..i * 7]));
        }
        w.attribute("big", Value::Int(i64::MAX));
        w.end(Some(&long));
        let body = w.take();
        let request = ExportTraceServiceRequest::decode(body.as_ref()).unwrap();
        assert_eq!(request.encode_to_vec(), body.as_ref());
        let span = &request.resource_spans[0].scope_spans[0].spans[0];
        assert_eq!(span.trace_state.len(), 70_000);
        assert_eq!(span.attributes.len(), 201);
    }
}
