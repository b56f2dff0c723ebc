//! moto's standalone S3 server for the tests that write to a bucket (exports, files).

use std::time::{Duration, Instant};

use switchyard_testkit::TestClient;

/// moto's S3 server: `SWITCHYARD_TEST_MOTO`, else what `scripts/moto` installs (once).
pub fn moto_binary() -> std::path::PathBuf {
    if let Ok(path) = std::env::var("SWITCHYARD_TEST_MOTO") {
        return path.into();
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = std::process::Command::new(root.join("scripts/moto"))
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("scripts/moto runs");
    assert!(out.status.success(), "scripts/moto failed");
    String::from_utf8(out.stdout).unwrap().lines().last().expect("a path").trim().into()
}

/// A moto S3 server on a free port, killed when dropped.
pub struct Moto {
    child: std::process::Child,
    port: u16,
}

impl Moto {
    pub fn start() -> Moto {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = std::process::Command::new(moto_binary())
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("moto_server starts");
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "moto_server never opened port {port}");
            std::thread::sleep(Duration::from_millis(25));
        }
        Moto { child, port }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn signal(&self, signal: &str) {
        let status = std::process::Command::new("kill").args([signal, &self.child.id().to_string()]).status().unwrap();
        assert!(status.success());
    }

    /// Every key in `bucket` and the ids of the records in each object, read with boto3 (moto's
    /// own dependency, beside it in its virtualenv): an independent S3 client, signing as AWS does;
    /// Parquet objects with pyarrow, which also checks their types and a few columns.
    pub fn objects(&self, bucket: &str) -> Vec<(String, Vec<String>)> {
        let python = moto_binary().with_file_name("python");
        let script = r#"
import boto3, io, json, os, sys
s3 = boto3.client("s3", endpoint_url=sys.argv[1], region_name="us-east-1",
                  aws_access_key_id="test", aws_secret_access_key="test")
out = []
for page in s3.get_paginator("list_objects_v2").paginate(Bucket=sys.argv[2]):
    for obj in page.get("Contents", []):
        body = s3.get_object(Bucket=sys.argv[2], Key=obj["Key"])["Body"].read()
        if obj["Key"].endswith(".parquet"):
            import pyarrow.parquet as pq
            table = pq.read_table(io.BytesIO(body), use_threads=False)
            rows = table.to_pylist()
            assert table.schema.field("ts_ms").type.unit == "ms", table.schema
            assert all(r["status"] == 200 and r["model_served"] == "m" and r["total_tokens"] > 0 for r in rows), rows[:2]
            out.append([obj["Key"], [r["id"] for r in rows]])
        else:
            out.append([obj["Key"], [json.loads(l)["id"] for l in body.decode().splitlines() if l]])
print(json.dumps(out), flush=True)
# pyarrow's thread pools can abort the interpreter's teardown ("terminate called without an
# active exception"): the answer is out, so leave without it.
os._exit(0)
"#;
        let out = std::process::Command::new(python).args(["-c", script, &self.url(), bucket]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// Every key in `bucket` and its size, read with boto3.
    pub fn keys(&self, bucket: &str) -> Vec<(String, u64)> {
        let python = moto_binary().with_file_name("python");
        let script = r#"
import boto3, json, sys
s3 = boto3.client("s3", endpoint_url=sys.argv[1], region_name="us-east-1",
                  aws_access_key_id="test", aws_secret_access_key="test")
out = []
for page in s3.get_paginator("list_objects_v2").paginate(Bucket=sys.argv[2]):
    out += [[o["Key"], o["Size"]] for o in page.get("Contents", [])]
print(json.dumps(out))
"#;
        let out = std::process::Command::new(python).args(["-c", script, &self.url(), bucket]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// The ids of every record in every object of `bucket`, repeats included.
    pub fn record_ids(&self, bucket: &str) -> Vec<String> {
        self.objects(bucket).into_iter().flat_map(|(_, ids)| ids).collect()
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A moto server with an empty bucket `usage`.
pub async fn moto_with_bucket(client: &TestClient) -> Moto {
    moto_with(client, "usage").await
}

/// A moto server with an empty bucket named `bucket`.
pub async fn moto_with(client: &TestClient, bucket: &str) -> Moto {
    let moto = Moto::start();
    let made =
        client.request(http::Method::PUT, &format!("{}/{bucket}", moto.url()), bytes::Bytes::new(), &[]).await.unwrap();
    assert_eq!(made.status, 200, "{}", made.text());
    moto
}
