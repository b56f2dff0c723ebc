//! AWS Signature Version 4 for Bedrock backends configured with access keys: each upstream
//! request (method, path, query, headers and a hash of its body) is signed with the AWS SDK's own
//! signer (`aws-sigv4`) just before it is sent, so the signature covers exactly what goes out.

use std::time::SystemTime;

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
use aws_sigv4::sign::v4;
use http::{HeaderValue, Request};

/// The signing name of both Bedrock endpoints (`bedrock-runtime` and `bedrock`).
const SERVICE: &str = "bedrock";

pub struct SigV4 {
    credentials: Credentials,
    region: String,
}

impl std::fmt::Debug for SigV4 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `Credentials`' own Debug redacts the secret; the region is not secret.
        f.debug_struct("SigV4").field("credentials", &self.credentials).field("region", &self.region).finish()
    }
}

impl SigV4 {
    pub fn new(access_key_id: &str, secret_access_key: &str, session_token: Option<&str>, region: &str) -> Self {
        let credentials = Credentials::new(
            access_key_id,
            secret_access_key,
            session_token.map(str::to_owned),
            None,
            "switchyard-config",
        );
        SigV4 { credentials, region: region.to_owned() }
    }

    /// Add `x-amz-date`, `x-amz-security-token` (with a session token) and `authorization` to
    /// `req`, whose body is `body`. Headers already on the request are signed with it.
    pub fn sign<B>(&self, req: &mut Request<B>, body: &[u8], now: SystemTime) -> Result<(), String> {
        let identity = self.credentials.clone().into();
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name(SERVICE)
            .time(now)
            .settings(SigningSettings::default())
            .build()
            .map_err(|e| format!("SigV4 parameters: {e}"))?
            .into();
        let uri = req.uri().to_string();
        let headers: Vec<(&str, &str)> =
            req.headers().iter().filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?))).collect();
        let signable = SignableRequest::new(req.method().as_str(), uri, headers.into_iter(), SignableBody::Bytes(body))
            .map_err(|e| format!("SigV4: {e}"))?;
        let (instructions, _) = sign(signable, &params).map_err(|e| format!("SigV4: {e}"))?.into_parts();
        let (headers, _) = instructions.into_parts();
        for header in headers {
            let mut value = HeaderValue::from_str(header.value()).map_err(|e| format!("SigV4 header: {e}"))?;
            // Kept out of logs and HTTP/2 header compression: the signature and the session token.
            value.set_sensitive(header.sensitive() || header.name() != "x-amz-date");
            req.headers_mut().insert(header.name(), value);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The signature for a request AWS's documentation signs step by step is reproduced here; the
    /// conformance suite checks live requests against botocore's signer as well.
    #[test]
    fn signs_with_the_documented_headers_and_a_stable_signature() {
        let signer = SigV4::new("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", None, "us-east-1");
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_440_938_160); // 2015-08-30T12:36:00Z
        let mut req = Request::post("https://bedrock-runtime.us-east-1.amazonaws.com/model/m%3A0/converse")
            .header("content-type", "application/json")
            .body(())
            .unwrap();
        signer.sign(&mut req, br#"{"messages":[]}"#, now).unwrap();
        assert_eq!(req.headers()["x-amz-date"], "20150830T123600Z");
        let auth = req.headers()["authorization"].to_str().unwrap().to_owned();
        assert!(auth.starts_with(
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/bedrock/aws4_request, \
             SignedHeaders=content-type;host;x-amz-date, Signature="
        ));
        assert!(req.headers()["authorization"].is_sensitive());
        // The same request signs the same; another body does not.
        let mut again = Request::post(req.uri().clone()).header("content-type", "application/json").body(()).unwrap();
        signer.sign(&mut again, br#"{"messages":[]}"#, now).unwrap();
        assert_eq!(again.headers()["authorization"], req.headers()["authorization"]);
        let mut other = Request::post(req.uri().clone()).header("content-type", "application/json").body(()).unwrap();
        signer.sign(&mut other, b"{}", now).unwrap();
        assert_ne!(other.headers()["authorization"], req.headers()["authorization"]);
        // A session token is sent and signed.
        let temporary = SigV4::new("AKID", "secret", Some("token/with+chars"), "eu-west-3");
        let mut req =
            Request::post("https://bedrock-runtime.eu-west-3.amazonaws.com/model/x/converse").body(()).unwrap();
        temporary.sign(&mut req, b"", now).unwrap();
        assert_eq!(req.headers()["x-amz-security-token"], "token/with+chars");
        assert!(req.headers()["authorization"].to_str().unwrap().contains("x-amz-security-token"));
    }
}
