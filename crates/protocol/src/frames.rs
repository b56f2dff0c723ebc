//! Incremental framing of stream bodies: lines (NDJSON) and server-sent events, fed bytes split
//! anywhere. Complete lines are handed out as slices of the input; only a trailing partial line is
//! copied, so each byte is copied at most once.

use crate::error::TranslateError;

/// Longest line (and longest SSE event's data) a stream may send: a backend that sends more
/// without a line end is refused rather than buffered without bound.
pub const MAX_LINE_BYTES: usize = 1024 * 1024;

fn too_long() -> TranslateError {
    TranslateError::Invalid(format!("the backend sent a stream line longer than {MAX_LINE_BYTES} bytes"))
}

/// Splits bytes into lines (without the `\n` or a `\r` before it).
#[derive(Debug, Default)]
pub(crate) struct LineSplitter {
    partial: Vec<u8>,
}

impl LineSplitter {
    pub(crate) fn feed(
        &mut self,
        mut bytes: &[u8],
        mut on_line: impl FnMut(&[u8]) -> Result<(), TranslateError>,
    ) -> Result<(), TranslateError> {
        if !self.partial.is_empty() {
            let Some(end) = bytes.iter().position(|&b| b == b'\n') else {
                if self.partial.len() + bytes.len() > MAX_LINE_BYTES {
                    return Err(too_long());
                }
                self.partial.extend_from_slice(bytes);
                return Ok(());
            };
            if self.partial.len() + end > MAX_LINE_BYTES {
                return Err(too_long());
            }
            self.partial.extend_from_slice(&bytes[..end]);
            bytes = &bytes[end + 1..];
            let line = std::mem::take(&mut self.partial);
            let result = on_line(trim_cr(&line));
            // Keep the allocation for the next partial line.
            self.partial = line;
            self.partial.clear();
            result?;
        }
        while let Some(end) = bytes.iter().position(|&b| b == b'\n') {
            on_line(trim_cr(&bytes[..end]))?;
            bytes = &bytes[end + 1..];
        }
        if bytes.len() > MAX_LINE_BYTES {
            return Err(too_long());
        }
        self.partial.extend_from_slice(bytes);
        Ok(())
    }

    /// The input ended: hands out a last line that had no `\n`.
    pub(crate) fn finish(
        &mut self,
        mut on_line: impl FnMut(&[u8]) -> Result<(), TranslateError>,
    ) -> Result<(), TranslateError> {
        if self.partial.is_empty() {
            return Ok(());
        }
        let line = std::mem::take(&mut self.partial);
        on_line(trim_cr(&line))
    }
}

fn trim_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// Server-sent events: `event:` and `data:` lines up to a blank line. Hands out each event's name
/// (empty when it had none) and data (several `data:` lines joined with `\n`).
#[derive(Debug, Default)]
pub struct SseParser {
    lines: LineSplitter,
    event: String,
    data: Vec<u8>,
    has_data: bool,
}

impl SseParser {
    pub fn feed(
        &mut self,
        bytes: &[u8],
        mut on_event: impl FnMut(&str, &[u8]) -> Result<(), TranslateError>,
    ) -> Result<(), TranslateError> {
        let SseParser { lines, event, data, has_data } = self;
        lines.feed(bytes, |line| sse_line(line, event, data, has_data, &mut on_event))
    }

    pub fn finish(
        &mut self,
        mut on_event: impl FnMut(&str, &[u8]) -> Result<(), TranslateError>,
    ) -> Result<(), TranslateError> {
        let SseParser { lines, event, data, has_data } = self;
        lines.finish(|line| sse_line(line, event, data, has_data, &mut on_event))?;
        // A last event without its blank line still counts.
        sse_line(b"", event, data, has_data, &mut on_event)
    }
}

fn sse_line(
    line: &[u8],
    event: &mut String,
    data: &mut Vec<u8>,
    has_data: &mut bool,
    on_event: &mut impl FnMut(&str, &[u8]) -> Result<(), TranslateError>,
) -> Result<(), TranslateError> {
    if line.is_empty() {
        let result = if *has_data { on_event(event, data) } else { Ok(()) };
        event.clear();
        data.clear();
        *has_data = false;
        return result;
    }
    let (field, value) = match line.iter().position(|&b| b == b':') {
        Some(0) => return Ok(()), // a comment (keep-alive)
        Some(colon) => {
            let value = &line[colon + 1..];
            (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
        }
        None => (line, &b""[..]),
    };
    match field {
        b"data" => {
            if data.len() + value.len() >= MAX_LINE_BYTES {
                return Err(too_long());
            }
            if *has_data {
                data.push(b'\n');
            }
            data.extend_from_slice(value);
            *has_data = true;
        }
        b"event" => {
            event.clear();
            event.push_str(&String::from_utf8_lossy(value));
        }
        _ => {} // id, retry: nothing a translation needs
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endless_line_is_refused_not_buffered() {
        let mut lines = LineSplitter::default();
        let chunk = vec![b'x'; 64 * 1024];
        let mut result = Ok(());
        for _ in 0..(MAX_LINE_BYTES / chunk.len() + 1) {
            result = lines.feed(&chunk, |_| Ok(()));
            if result.is_err() {
                break;
            }
        }
        assert!(result.is_err());
        assert!(lines.partial.len() <= MAX_LINE_BYTES);
        let mut sse = SseParser::default();
        let mut event = b"data: ".to_vec();
        event.extend_from_slice(&vec![b'y'; MAX_LINE_BYTES]);
        event.extend_from_slice(b"\n\n");
        assert!(sse.feed(&event, |_, _| Ok(())).is_err());
    }

    fn events_of(chunks: &[&[u8]]) -> Vec<(String, String)> {
        let mut parser = SseParser::default();
        let mut events = Vec::new();
        for chunk in chunks {
            parser
                .feed(chunk, |name, data| {
                    events.push((name.to_owned(), String::from_utf8(data.to_vec()).unwrap()));
                    Ok(())
                })
                .unwrap();
        }
        parser
            .finish(|name, data| {
                events.push((name.to_owned(), String::from_utf8(data.to_vec()).unwrap()));
                Ok(())
            })
            .unwrap();
        events
    }

    #[test]
    fn sse_split_anywhere_gives_the_same_events() {
        let stream: &[u8] =
            b": keep-alive\r\nevent: a\r\ndata: {\"x\":1}\r\n\r\ndata: one\ndata: two\n\nevent: b\ndata:[DONE]";
        let whole = events_of(&[stream]);
        assert_eq!(
            whole,
            vec![
                ("a".to_owned(), "{\"x\":1}".to_owned()),
                (String::new(), "one\ntwo".to_owned()),
                ("b".to_owned(), "[DONE]".to_owned()),
            ]
        );
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(events_of(&bytes), whole);
        for split in 0..stream.len() {
            assert_eq!(events_of(&[&stream[..split], &stream[split..]]), whole, "split at {split}");
        }
    }

    #[test]
    fn lines_split_anywhere() {
        let input = b"{\"a\":1}\n{\"b\":2}\r\n{\"c\":3}";
        let collect = |chunks: Vec<&[u8]>| {
            let mut splitter = LineSplitter::default();
            let mut lines = Vec::new();
            for chunk in chunks {
                splitter
                    .feed(chunk, |l| {
                        lines.push(l.to_vec());
                        Ok(())
                    })
                    .unwrap();
            }
            splitter
                .finish(|l| {
                    lines.push(l.to_vec());
                    Ok(())
                })
                .unwrap();
            lines
        };
        let whole = collect(vec![&input[..]]);
        assert_eq!(whole.len(), 3);
        assert_eq!(collect(input.chunks(1).collect()), whole);
    }
}
