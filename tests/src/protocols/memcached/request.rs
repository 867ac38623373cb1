//! Requests: the builders of memcached's commands, and the check a payload passes before
//! it is sent.

use std::fmt;

use bytes::{BufMut, Bytes, BytesMut};

use super::{MAX_KEY_LEN, find_line};

/// `get KEY`: [`Reply::Values`](super::Reply::Values) with the value, or none on a miss.
pub fn get(key: impl AsRef<[u8]>) -> Bytes {
    command(&[b"get", key.as_ref()], None)
}

/// `get KEY KEY ...`: [`Reply::Values`](super::Reply::Values) with the values found, in the order
/// asked.
pub fn get_many<K: AsRef<[u8]>>(keys: impl IntoIterator<Item = K>) -> Bytes {
    let mut line = BytesMut::from(&b"get"[..]);
    for key in keys {
        line.put_u8(b' ');
        line.put_slice(key.as_ref());
    }
    line.put_slice(b"\r\n");
    line.freeze()
}

/// `set KEY 0 0 LEN` and the value: [`Reply::Stored`](super::Reply::Stored).
pub fn set(key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Bytes {
    store("set", key, 0, 0, value)
}

/// A storage command (`set`, `add`, `replace`, `append`, `prepend`) with flags and an
/// expiry time (seconds, 0 for never).
pub fn store(
    verb: &str,
    key: impl AsRef<[u8]>,
    flags: u32,
    exptime: u32,
    value: impl AsRef<[u8]>,
) -> Bytes {
    let value = value.as_ref();
    let numbers = format!("{flags} {exptime} {}", value.len());
    command(
        &[verb.as_bytes(), key.as_ref(), numbers.as_bytes()],
        Some(value),
    )
}

/// `incr KEY DELTA`: [`Reply::Number`](super::Reply::Number) with the new value, or
/// [`Reply::NotFound`](super::Reply::NotFound).
pub fn incr(key: impl AsRef<[u8]>, delta: u64) -> Bytes {
    command(&[b"incr", key.as_ref(), delta.to_string().as_bytes()], None)
}

/// `decr KEY DELTA`: [`Reply::Number`](super::Reply::Number) with the new value (memcached stops at
/// 0), or [`Reply::NotFound`](super::Reply::NotFound).
pub fn decr(key: impl AsRef<[u8]>, delta: u64) -> Bytes {
    command(&[b"decr", key.as_ref(), delta.to_string().as_bytes()], None)
}

/// `delete KEY`: [`Reply::Deleted`](super::Reply::Deleted) or
/// [`Reply::NotFound`](super::Reply::NotFound).
pub fn delete(key: impl AsRef<[u8]>) -> Bytes {
    command(&[b"delete", key.as_ref()], None)
}

/// `version`: [`Reply::Version`](super::Reply::Version).
pub fn version() -> Bytes {
    Bytes::from_static(b"version\r\n")
}

fn command(words: &[&[u8]], data: Option<&[u8]>) -> Bytes {
    let len =
        words.iter().map(|w| w.len() + 1).sum::<usize>() + 1 + data.map_or(0, |d| d.len() + 2);
    let mut out = BytesMut::with_capacity(len);
    for (i, word) in words.iter().enumerate() {
        if i > 0 {
            out.put_u8(b' ');
        }
        out.put_slice(word);
    }
    out.put_slice(b"\r\n");
    if let Some(data) = data {
        out.put_slice(data);
        out.put_slice(b"\r\n");
    }
    out.freeze()
}

/// Why a request payload is not one command whose answer can be told apart.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RequestError {
    /// No `\r\n` ends the command line (within [`MAX_LINE`](super::MAX_LINE) bytes).
    Unterminated,
    /// A command this codec does not know (so it cannot tell where its answer ends).
    UnknownCommand(String),
    /// The command's words are not what the command takes.
    Syntax(&'static str),
    /// A key that is empty, longer than [`MAX_KEY_LEN`], or holds whitespace or control bytes.
    BadKey,
    /// `noreply`: memcached would send no answer, and in order, the next answer would be
    /// taken for this request's.
    NoReply,
    /// The data block is not the announced length followed by `\r\n`.
    DataLength {
        /// The length the command announced.
        declared: usize,
        /// The bytes that follow the command line.
        actual: usize,
    },
    /// The value is longer than the codec's limit.
    ValueTooLarge {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Bytes after the command (a second command in one payload).
    Trailing,
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unterminated => write!(f, "no \\r\\n ends the command line"),
            Self::UnknownCommand(verb) => write!(f, "unknown memcached command {verb:?}"),
            Self::Syntax(what) => write!(f, "malformed command: {what}"),
            Self::BadKey => write!(
                f,
                "a key is 1 to {MAX_KEY_LEN} bytes without whitespace or control bytes"
            ),
            Self::NoReply => write!(
                f,
                "noreply is refused: in order, a request without an answer would take the next one's"
            ),
            Self::DataLength { declared, actual } => write!(
                f,
                "the data block is {actual} bytes, the command announced {declared} + 2"
            ),
            Self::ValueTooLarge { len, max } => {
                write!(
                    f,
                    "a value of {len} bytes is longer than the limit of {max}"
                )
            }
            Self::Trailing => write!(f, "bytes after the command: one command per request"),
        }
    }
}

impl std::error::Error for RequestError {}

/// Checks that `payload` is exactly one command with a self-delimiting answer.
pub fn check_request(payload: &[u8], max_value: usize) -> Result<(), RequestError> {
    let eol = match find_line(payload) {
        Ok(Some(eol)) => eol,
        _ => return Err(RequestError::Unterminated),
    };
    let (line, rest) = (&payload[..eol], &payload[eol + 2..]);
    let mut words = line.split(|&b| b == b' ');
    let verb = words.next().unwrap_or_default();
    let mut args = Args(words);
    let data_len = match verb {
        b"get" | b"gets" | b"gat" | b"gats" => {
            if verb.starts_with(b"gat") {
                args.number::<u32>("an expiry time")?;
            }
            let mut any_key = false;
            for key in args.0.by_ref() {
                check_key(key)?;
                any_key = true;
            }
            if !any_key {
                return Err(RequestError::Syntax("a key is missing"));
            }
            None
        }
        b"set" | b"add" | b"replace" | b"append" | b"prepend" | b"cas" => {
            check_key(args.word("a key")?)?;
            args.number::<u32>("flags")?;
            args.number::<i64>("an expiry time")?;
            let len = args.number::<usize>("a length")?;
            if verb == b"cas" {
                args.number::<u64>("a cas unique")?;
            }
            args.end()?;
            Some(len)
        }
        b"incr" | b"decr" => {
            check_key(args.word("a key")?)?;
            args.number::<u64>("a delta")?;
            args.end()?;
            None
        }
        b"delete" => {
            check_key(args.word("a key")?)?;
            args.end()?;
            None
        }
        b"touch" => {
            check_key(args.word("a key")?)?;
            args.number::<i64>("an expiry time")?;
            args.end()?;
            None
        }
        b"flush_all" => {
            if args.0.clone().next().is_some() {
                args.number::<u32>("a delay")?;
            }
            args.end()?;
            None
        }
        b"version" | b"stats" => {
            args.end()?;
            None
        }
        other => {
            return Err(RequestError::UnknownCommand(
                String::from_utf8_lossy(other).into_owned(),
            ));
        }
    };
    match data_len {
        None if rest.is_empty() => Ok(()),
        None => Err(RequestError::Trailing),
        Some(len) if len > max_value => Err(RequestError::ValueTooLarge {
            len,
            max: max_value,
        }),
        Some(len) if rest.len() > len.saturating_add(2) && rest[len..len + 2] == *b"\r\n" => {
            Err(RequestError::Trailing)
        }
        Some(len) if rest.len() != len.saturating_add(2) || rest[len..] != *b"\r\n" => {
            Err(RequestError::DataLength {
                declared: len,
                actual: rest.len(),
            })
        }
        Some(_) => Ok(()),
    }
}

struct Args<'a, I: Iterator<Item = &'a [u8]>>(I);

impl<'a, I: Iterator<Item = &'a [u8]> + Clone> Args<'a, I> {
    fn word(&mut self, what: &'static str) -> Result<&'a [u8], RequestError> {
        match self.0.next() {
            Some(b"noreply") => Err(RequestError::NoReply),
            Some(word) if !word.is_empty() => Ok(word),
            _ => Err(RequestError::Syntax(what)),
        }
    }

    fn number<T: std::str::FromStr>(&mut self, what: &'static str) -> Result<T, RequestError> {
        let word = self.word(what)?;
        std::str::from_utf8(word)
            .ok()
            .filter(|s| s.bytes().all(|b| b.is_ascii_digit() || b == b'-'))
            .and_then(|s| s.parse().ok())
            .ok_or(RequestError::Syntax(what))
    }

    fn end(&mut self) -> Result<(), RequestError> {
        match self.0.next() {
            None => Ok(()),
            Some(b"noreply") => Err(RequestError::NoReply),
            Some(_) => Err(RequestError::Syntax("too many arguments")),
        }
    }
}

fn check_key(key: &[u8]) -> Result<(), RequestError> {
    if key.is_empty() || key.len() > MAX_KEY_LEN || key.iter().any(|&b| b <= b' ' || b == 0x7f) {
        return Err(RequestError::BadKey);
    }
    Ok(())
}
