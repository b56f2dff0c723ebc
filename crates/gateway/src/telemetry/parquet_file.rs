//! A batch of usage records as one Parquet file (Snappy-compressed, one row group), for the S3
//! sink's `format: parquet`: the columns of `UsageRecord`, typed (timestamps as UTC milliseconds,
//! counts as 64-bit integers), absent values as nulls, the stored bodies as two string columns.
//! Written with the `parquet` crate's column writers, so no Arrow arrays are built on the way.

use std::sync::Arc;

use parquet::basic::Compression;
use parquet::column::writer::ColumnWriter;
use parquet::data_type::ByteArray;
use parquet::errors::ParquetError;
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;

use crate::records::UsageRecord;

/// The file's schema; the columns are written in this order by [`encode`].
const SCHEMA: &str = "message usage_record {
    REQUIRED BYTE_ARRAY id (STRING);
    REQUIRED INT64 ts_ms (TIMESTAMP(MILLIS, true));
    OPTIONAL BYTE_ARRAY key_id (STRING);
    OPTIONAL BYTE_ARRAY user (STRING);
    OPTIONAL BYTE_ARRAY team (STRING);
    REQUIRED BYTE_ARRAY model_requested (STRING);
    REQUIRED BYTE_ARRAY model_served (STRING);
    OPTIONAL BYTE_ARRAY backend (STRING);
    REQUIRED INT32 status;
    REQUIRED INT64 prompt_tokens;
    REQUIRED INT64 completion_tokens;
    REQUIRED INT64 total_tokens;
    REQUIRED DOUBLE latency_ms;
    OPTIONAL DOUBLE ttft_ms;
    REQUIRED DOUBLE cost_usd;
    REQUIRED BOOLEAN estimated;
    OPTIONAL BYTE_ARRAY tool (STRING);
    OPTIONAL INT64 response_bytes;
    OPTIONAL BYTE_ARRAY route (STRING);
    OPTIONAL BYTE_ARRAY request_body (STRING);
    OPTIONAL BYTE_ARRAY response_body (STRING);
    REQUIRED INT64 cache_read_tokens;
    REQUIRED INT64 cache_write_tokens;
    OPTIONAL BYTE_ARRAY backend_key (STRING);
}";

/// One column's values: present ones, and a definition level per row (1 present, 0 null) for
/// optional columns.
enum Column {
    Text(Vec<ByteArray>, Option<Vec<i16>>),
    Int64(Vec<i64>, Option<Vec<i16>>),
    Int32(Vec<i32>),
    Double(Vec<f64>, Option<Vec<i16>>),
    Bool(Vec<bool>),
}

fn text(records: &[UsageRecord], get: impl Fn(&UsageRecord) -> &str) -> Column {
    Column::Text(records.iter().map(|r| ByteArray::from(get(r).as_bytes().to_vec())).collect(), None)
}

fn optional_text(records: &[UsageRecord], get: impl Fn(&UsageRecord) -> Option<&str>) -> Column {
    let levels = records.iter().map(|r| i16::from(get(r).is_some())).collect();
    Column::Text(
        records.iter().filter_map(&get).map(|s| ByteArray::from(s.as_bytes().to_vec())).collect(),
        Some(levels),
    )
}

fn int64(records: &[UsageRecord], get: impl Fn(&UsageRecord) -> u64) -> Column {
    Column::Int64(records.iter().map(|r| i64::try_from(get(r)).unwrap_or(i64::MAX)).collect(), None)
}

/// How many rows a Parquet file holds (from its footer).
pub fn rows(file: bytes::Bytes) -> Result<usize, String> {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let reader = SerializedFileReader::new(file).map_err(|e| format!("reading a Parquet object: {e}"))?;
    usize::try_from(reader.metadata().file_metadata().num_rows()).map_err(|e| format!("reading a Parquet object: {e}"))
}

/// The file's bytes.
pub fn encode(records: &[UsageRecord]) -> Result<Vec<u8>, String> {
    encode_columns(records).map_err(|e| format!("encoding records as Parquet: {e}"))
}

fn encode_columns(records: &[UsageRecord]) -> Result<Vec<u8>, ParquetError> {
    let columns = vec![
        text(records, |r| &r.id),
        Column::Int64(records.iter().map(|r| r.ts_ms).collect(), None),
        optional_text(records, |r| r.key_id.as_deref()),
        optional_text(records, |r| r.user.as_deref()),
        optional_text(records, |r| r.team.as_deref()),
        text(records, |r| &r.model_requested),
        text(records, |r| &r.model_served),
        optional_text(records, |r| r.backend.as_deref()),
        Column::Int32(records.iter().map(|r| i32::from(r.status)).collect()),
        int64(records, |r| r.prompt_tokens),
        int64(records, |r| r.completion_tokens),
        int64(records, |r| r.total_tokens),
        Column::Double(records.iter().map(|r| r.latency_ms).collect(), None),
        Column::Double(
            records.iter().filter_map(|r| r.ttft_ms).collect(),
            Some(records.iter().map(|r| i16::from(r.ttft_ms.is_some())).collect()),
        ),
        Column::Double(records.iter().map(|r| r.cost_usd).collect(), None),
        Column::Bool(records.iter().map(|r| r.estimated).collect()),
        optional_text(records, |r| r.tool.as_deref()),
        Column::Int64(
            records.iter().filter_map(|r| r.response_bytes).map(|n| i64::try_from(n).unwrap_or(i64::MAX)).collect(),
            Some(records.iter().map(|r| i16::from(r.response_bytes.is_some())).collect()),
        ),
        optional_text(records, |r| r.route.as_deref()),
        optional_text(records, |r| r.bodies.as_ref().map(|b| b.request.as_str())),
        optional_text(records, |r| r.bodies.as_ref().map(|b| b.response.as_str())),
        int64(records, |r| r.cache_read_tokens),
        int64(records, |r| r.cache_write_tokens),
        optional_text(records, |r| r.backend_key.as_deref()),
    ];
    let schema = Arc::new(parse_message_type(SCHEMA)?);
    let properties = Arc::new(WriterProperties::builder().set_compression(Compression::SNAPPY).build());
    let mut file = SerializedFileWriter::new(Vec::with_capacity(records.len() * 128), schema, properties)?;
    let mut group = file.next_row_group()?;
    let mut columns = columns.into_iter();
    while let Some(mut writer) = group.next_column()? {
        let column = columns.next().ok_or_else(|| ParquetError::General("more columns than values".to_owned()))?;
        match (writer.untyped(), column) {
            (ColumnWriter::ByteArrayColumnWriter(w), Column::Text(values, levels)) => {
                w.write_batch(&values, levels.as_deref(), None)?;
            }
            (ColumnWriter::Int64ColumnWriter(w), Column::Int64(values, levels)) => {
                w.write_batch(&values, levels.as_deref(), None)?;
            }
            (ColumnWriter::Int32ColumnWriter(w), Column::Int32(values)) => {
                w.write_batch(&values, None, None)?;
            }
            (ColumnWriter::DoubleColumnWriter(w), Column::Double(values, levels)) => {
                w.write_batch(&values, levels.as_deref(), None)?;
            }
            (ColumnWriter::BoolColumnWriter(w), Column::Bool(values)) => {
                w.write_batch(&values, None, None)?;
            }
            _ => return Err(ParquetError::General("a column's values do not match its type".to_owned())),
        }
        writer.close()?;
    }
    group.close()?;
    file.into_inner()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::StoredBodies;
    use bytes::Bytes;
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use parquet::record::Field;

    fn record(id: &str, full: bool) -> UsageRecord {
        UsageRecord {
            id: id.to_owned(),
            ts_ms: 1_764_000_000_123,
            key_id: full.then(|| "k_1".to_owned()),
            user: None,
            team: full.then(|| "team \"a\"\n".to_owned()),
            model_requested: "fast".into(),
            model_served: "llama3.2:1b".into(),
            backend: Some("b0".into()),
            status: 200,
            prompt_tokens: 12,
            completion_tokens: 7,
            total_tokens: 19,
            cache_read_tokens: 4,
            cache_write_tokens: 2,
            latency_ms: 12.5,
            ttft_ms: full.then_some(3.25),
            cost_usd: 0.0001,
            estimated: !full,
            tool: None,
            response_bytes: full.then_some(42),
            backend_key: None,
            route: Some("cache-aware: 3 blocks".into()),
            bodies: full.then(|| {
                Box::new(StoredBodies { request: "{\"x\":1}".into(), response: "ok ✓".into(), truncated: false })
            }),
            guardrails: Vec::new(),
            guard_call: None,
            units: None,
            batch_id: None,
            experiment: None,
            variant: None,
            policy: None,
            tags: Vec::new(),
            task_id: None,
            task_state: None,
        }
    }

    #[test]
    fn records_read_back_column_for_column_with_nulls_where_absent() {
        let records = vec![record("a", true), record("b", false), record("c", true)];
        let bytes = encode(&records).unwrap();
        assert_eq!(&bytes[..4], b"PAR1");
        let reader = SerializedFileReader::new(Bytes::from(bytes)).unwrap();
        assert_eq!(reader.metadata().file_metadata().num_rows(), 3);
        let rows: Vec<_> = reader.get_row_iter(None).unwrap().map(|r| r.unwrap()).collect();
        let field = |row: usize, name: &str| {
            rows[row].get_column_iter().find(|(n, _)| n.as_str() == name).map(|(_, f)| f.clone()).unwrap()
        };
        assert_eq!(field(0, "id"), Field::Str("a".into()));
        assert_eq!(field(1, "id"), Field::Str("b".into()));
        assert_eq!(field(0, "ts_ms"), Field::TimestampMillis(1_764_000_000_123));
        assert_eq!(field(0, "team"), Field::Str("team \"a\"\n".into()));
        assert_eq!(field(1, "team"), Field::Null);
        assert_eq!(field(1, "user"), Field::Null);
        assert_eq!(field(2, "status"), Field::Int(200));
        assert_eq!(field(2, "total_tokens"), Field::Long(19));
        assert_eq!(field(0, "ttft_ms"), Field::Double(3.25));
        assert_eq!(field(1, "ttft_ms"), Field::Null);
        assert_eq!(field(1, "estimated"), Field::Bool(true));
        assert_eq!(field(2, "response_bytes"), Field::Long(42));
        assert_eq!(field(1, "response_bytes"), Field::Null);
        assert_eq!(field(0, "response_body"), Field::Str("ok ✓".into()));
        assert_eq!(field(1, "request_body"), Field::Null);
        assert_eq!(field(2, "route"), Field::Str("cache-aware: 3 blocks".into()));
    }

    #[test]
    fn an_empty_batch_is_a_valid_file_and_rows_are_counted_from_the_footer() {
        let reader = SerializedFileReader::new(Bytes::from(encode(&[]).unwrap())).unwrap();
        assert_eq!(reader.metadata().file_metadata().num_rows(), 0);
        assert_eq!(rows(Bytes::from(encode(&[record("a", true), record("b", false)]).unwrap())), Ok(2));
        assert!(rows(Bytes::from_static(b"not parquet")).is_err());
    }
}
