//! The ext_proc messages of the Endpoint Picker protocol, built and read: the pick as a header
//! mutation and `envoy.lb` dynamic metadata, the subset hint and the served endpoint read off a
//! request's metadata, the body streamed back, an immediate answer.

use envoy_types::pb::envoy::config::core::v3::{header_value_option, HeaderValue, HeaderValueOption, Metadata};
use envoy_types::pb::envoy::r#type::v3::HttpStatus;
use envoy_types::pb::envoy::service::ext_proc::v3::{
    body_mutation, processing_response, BodyMutation, BodyResponse, CommonResponse, HeaderMutation, HeadersResponse,
    HttpHeaders, ImmediateResponse, ProcessingResponse, StreamedBodyResponse, TrailersResponse,
};
use envoy_types::pb::google::protobuf::{value::Kind, Struct, Value};

/// The header (and `envoy.lb` metadata key) naming the picked endpoints, first choice first.
pub const DESTINATION: &str = "x-gateway-destination-endpoint";
/// The metadata namespace the pick is written to and the served endpoint is read from.
pub const LB_NAMESPACE: &str = "envoy.lb";
/// Where the data plane names the endpoint that served the request (response path).
pub const SERVED: &str = "x-gateway-destination-endpoint-served";
/// The namespace and key of the subset the pick must come from (request path).
pub const SUBSET_NAMESPACE: &str = "envoy.lb.subset_hint";
pub const SUBSET: &str = "x-gateway-destination-endpoint-subset";

/// Envoy streams bodies back in chunks of at most this many bytes (its gRPC messages stay small).
pub const BODY_CHUNK: usize = 62 * 1024;

/// A header's value as Envoy sends it: `raw_value` when set (Envoy's default), else `value`.
pub fn header_value(h: &HeaderValue) -> &[u8] {
    if h.raw_value.is_empty() {
        h.value.as_bytes()
    } else {
        &h.raw_value
    }
}

/// The headers of an `HttpHeaders` message as (name, value) pairs.
pub fn headers_of(h: &HttpHeaders) -> impl Iterator<Item = (&str, &[u8])> {
    h.headers.iter().flat_map(|m| m.headers.iter()).map(|h| (h.key.as_str(), header_value(h)))
}

/// A header set on the request, replacing any value the client sent (a client cannot pick its own
/// endpoint by sending the header itself).
pub fn set_header(name: &str, value: &[u8]) -> HeaderValueOption {
    HeaderValueOption {
        header: Some(HeaderValue { key: name.to_owned(), value: String::new(), raw_value: value.to_vec() }),
        append_action: header_value_option::HeaderAppendAction::OverwriteIfExistsOrAdd as i32,
        ..Default::default()
    }
}

fn string_value(s: &str) -> Value {
    Value { kind: Some(Kind::StringValue(s.to_owned())) }
}

fn namespace(key: &str, value: Value) -> Struct {
    Struct { fields: [(key.to_owned(), value)].into_iter().collect() }
}

/// The answer to the request headers once the pick is made: the endpoints in the header and in
/// `envoy.lb` metadata (equal, comma-separated), plus any other headers to set upstream.
pub fn picked(endpoints: &str, extra: Vec<HeaderValueOption>) -> ProcessingResponse {
    let mut set_headers = vec![set_header(DESTINATION, endpoints.as_bytes())];
    set_headers.extend(extra);
    let common = CommonResponse {
        header_mutation: Some(HeaderMutation { set_headers, remove_headers: Vec::new() }),
        // The route is chosen again with the header in place (routes may match on it).
        clear_route_cache: true,
        ..Default::default()
    };
    let inner = Value { kind: Some(Kind::StructValue(namespace(DESTINATION, string_value(endpoints)))) };
    ProcessingResponse {
        response: Some(processing_response::Response::RequestHeaders(HeadersResponse { response: Some(common) })),
        dynamic_metadata: Some(namespace(LB_NAMESPACE, inner)),
        ..Default::default()
    }
}

/// A chunk of the request body handed back unchanged.
pub fn request_body(body: Vec<u8>, end_of_stream: bool) -> ProcessingResponse {
    ProcessingResponse {
        response: Some(processing_response::Response::RequestBody(streamed(body, end_of_stream))),
        ..Default::default()
    }
}

/// A chunk of the response body handed back unchanged.
pub fn response_body(body: Vec<u8>, end_of_stream: bool) -> ProcessingResponse {
    ProcessingResponse {
        response: Some(processing_response::Response::ResponseBody(streamed(body, end_of_stream))),
        ..Default::default()
    }
}

fn streamed(body: Vec<u8>, end_of_stream: bool) -> BodyResponse {
    let mutation =
        body_mutation::Mutation::StreamedResponse(StreamedBodyResponse { body, end_of_stream, ..Default::default() });
    BodyResponse {
        response: Some(CommonResponse {
            body_mutation: Some(BodyMutation { mutation: Some(mutation) }),
            ..Default::default()
        }),
    }
}

/// The response headers, let through.
pub fn response_headers() -> ProcessingResponse {
    let common = CommonResponse::default();
    ProcessingResponse {
        response: Some(processing_response::Response::ResponseHeaders(HeadersResponse { response: Some(common) })),
        ..Default::default()
    }
}

/// Trailers let through, on the request or the response path.
pub fn trailers(request: bool) -> ProcessingResponse {
    let answer = TrailersResponse::default();
    let response = if request {
        processing_response::Response::RequestTrailers(answer)
    } else {
        processing_response::Response::ResponseTrailers(answer)
    };
    ProcessingResponse { response: Some(response), ..Default::default() }
}

/// Answer the client directly (the request goes nowhere): `status`, headers and body.
pub fn immediate(status: u16, headers: &[(String, String)], body: Vec<u8>, details: &str) -> ProcessingResponse {
    let set_headers = headers.iter().map(|(k, v)| set_header(k, v.as_bytes())).collect();
    let answer = ImmediateResponse {
        status: Some(HttpStatus { code: i32::from(status) }),
        headers: Some(HeaderMutation { set_headers, remove_headers: Vec::new() }),
        body,
        grpc_status: None,
        details: details.to_owned(),
    };
    ProcessingResponse {
        response: Some(processing_response::Response::ImmediateResponse(answer)),
        ..Default::default()
    }
}

/// The string (or list of strings) at `metadata[namespace][key]`, split on commas, trimmed.
/// `None`: the key is absent; `Some(empty)`: present but naming nothing.
pub fn endpoints_at(metadata: Option<&Metadata>, namespace: &str, key: &str) -> Option<Vec<String>> {
    let value = metadata?.filter_metadata.get(namespace)?.fields.get(key)?;
    let mut out = Vec::new();
    let mut push = |s: &str| out.extend(s.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned));
    match &value.kind {
        Some(Kind::StringValue(s)) => push(s),
        Some(Kind::ListValue(list)) => {
            for v in &list.values {
                if let Some(Kind::StringValue(s)) = &v.kind {
                    push(s);
                }
            }
        }
        _ => {}
    }
    Some(out)
}

/// Whether `endpoint` (`ip:port`) is in a subset hint, whose entries are `ip:port` or a bare
/// `ip` (any port of that address).
pub fn in_subset(subset: &[String], endpoint: &str) -> bool {
    let host = endpoint.rsplit_once(':').map_or(endpoint, |(host, _)| host);
    subset.iter().any(|s| s == endpoint || s == host)
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::google::protobuf::ListValue;

    fn metadata(value: Kind) -> Metadata {
        let mut m = Metadata::default();
        m.filter_metadata.insert(SUBSET_NAMESPACE.to_owned(), namespace(SUBSET, Value { kind: Some(value) }));
        m
    }

    #[test]
    fn a_subset_is_read_as_a_list_or_a_comma_joined_string() {
        let joined = metadata(Kind::StringValue("10.0.0.1:80, 10.0.0.2".into()));
        assert_eq!(endpoints_at(Some(&joined), SUBSET_NAMESPACE, SUBSET).unwrap(), ["10.0.0.1:80", "10.0.0.2"]);
        let list = metadata(Kind::ListValue(ListValue {
            values: vec![string_value("10.0.0.1:80"), string_value("10.0.0.3:80,10.0.0.4:80")],
        }));
        assert_eq!(
            endpoints_at(Some(&list), SUBSET_NAMESPACE, SUBSET).unwrap(),
            ["10.0.0.1:80", "10.0.0.3:80", "10.0.0.4:80"]
        );
        assert_eq!(
            endpoints_at(Some(&metadata(Kind::StringValue(String::new()))), SUBSET_NAMESPACE, SUBSET).unwrap().len(),
            0
        );
        assert!(endpoints_at(None, SUBSET_NAMESPACE, SUBSET).is_none());
    }

    #[test]
    fn a_bare_address_in_a_subset_admits_any_port() {
        let subset = vec!["10.0.0.1".to_owned(), "10.0.0.2:8000".to_owned()];
        assert!(in_subset(&subset, "10.0.0.1:9000"));
        assert!(in_subset(&subset, "10.0.0.2:8000"));
        assert!(!in_subset(&subset, "10.0.0.2:8001"));
        assert!(!in_subset(&subset, "10.0.0.3:8000"));
    }

    #[test]
    fn the_pick_is_the_same_in_the_header_and_the_metadata() {
        let answer = picked("10.0.0.1:80,10.0.0.2:80", Vec::new());
        let Some(processing_response::Response::RequestHeaders(h)) = &answer.response else { panic!() };
        let set = &h.response.as_ref().unwrap().header_mutation.as_ref().unwrap().set_headers[0];
        assert_eq!(set.header.as_ref().unwrap().raw_value, b"10.0.0.1:80,10.0.0.2:80");
        let lb = &answer.dynamic_metadata.as_ref().unwrap().fields[LB_NAMESPACE];
        let Some(Kind::StructValue(lb)) = &lb.kind else { panic!() };
        assert_eq!(lb.fields[DESTINATION], string_value("10.0.0.1:80,10.0.0.2:80"));
    }
}
