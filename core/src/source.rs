//! A capture file's bytes through a bounded buffer, refilled as the reader consumes them, and
//! decompressed on the way when the file is gzip, bzip2 or xz (told by its magic bytes, as
//! `nagledetect/read/compressed.py` tells them): memory follows the largest record, never
//! the file.
//!
//! The decompressors: flate2 (gzip, its pure-Rust backend), bzip2 (its pure-Rust
//! libbz2-rs-sys backend) and liblzma (xz, the maintained fork of xz2, built from its vendored
//! C source): each reads concatenated streams as Python's modules and the tools do.

use std::fs::File;
use std::io::{self, Cursor, ErrorKind, Read};

use crate::capture::NotACapture;

/// The buffer's first size; it grows only for a record or block larger than this.
const INITIAL_BUFFER_BYTES: usize = 1 << 20;
const MAGIC_BYTES: usize = 4;
const COMPRESSED_MAGICS: [(&[u8], &str); 5] = [
    (b"\x1f\x8b", "gzip"),
    (b"BZh", "bzip2"),
    (b"\xfd7zX", "xz"),
    (b"\x28\xb5\x2f\xfd", "zstd"),
    (b"PK\x03\x04", "zip"),
];
const UNREAD_COMPRESSION: &str =
    "decompress it to analyse it (nagledetect reads gzip, bzip2 and xz)";

type Input = Box<dyn Read + Send>;

/// The bytes of a capture, a window at a time: `available()` is what is buffered and not yet
/// consumed; `refill()` reads more.
pub struct Source {
    input: Input,
    compression: Option<&'static str>,
    buffer: Vec<u8>,
    start: usize,
    end: usize,
    consumed: u64,
    ended: bool,
    cut_short: Option<String>,
}

impl Source {
    /// Open the file at `path`, behind a decompressor when its magic names one read here.
    pub fn open(path: &str) -> Result<Source, NotACapture> {
        Source::with_buffer(path, INITIAL_BUFFER_BYTES)
    }

    /// As `open`, the buffer starting at `buffer_bytes` (at least 1).
    pub fn with_buffer(path: &str, buffer_bytes: usize) -> Result<Source, NotACapture> {
        let mut file = File::open(path).map_err(|error| NotACapture(why_unreadable(&error)))?;
        let mut head = Vec::with_capacity(MAGIC_BYTES);
        (&mut file)
            .take(MAGIC_BYTES as u64)
            .read_to_end(&mut head)
            .map_err(|error| NotACapture(why_unreadable(&error)))?;
        let compression = COMPRESSED_MAGICS
            .iter()
            .find(|(magic, _)| head.starts_with(magic))
            .map(|(_, name)| *name);
        let whole = Cursor::new(head).chain(file);
        let input: Input = match compression {
            None => Box::new(whole),
            Some("gzip") => Box::new(flate2::read::MultiGzDecoder::new(whole)),
            Some("bzip2") => Box::new(bzip2::read::MultiBzDecoder::new(whole)),
            Some("xz") => Box::new(liblzma::read::XzDecoder::new_multi_decoder(whole)),
            Some(other) => {
                return Err(NotACapture(format!(
                    "compressed with {other}: {UNREAD_COMPRESSION}"
                )));
            }
        };
        Ok(Source {
            input,
            compression,
            buffer: vec![0; buffer_bytes.max(1)],
            start: 0,
            end: 0,
            consumed: 0,
            ended: false,
            cut_short: None,
        })
    }

    /// The bytes read and not yet consumed.
    pub fn available(&self) -> &[u8] {
        &self.buffer[self.start..self.end]
    }

    /// The compression the file was read through, if any ("gzip", "bzip2", "xz").
    pub fn compression(&self) -> Option<&'static str> {
        self.compression
    }

    /// Whether everything there is has been read (`available()` is then all that is left).
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// Bytes consumed so far: the position of `available()` in the (decompressed) capture.
    pub fn position(&self) -> u64 {
        self.consumed
    }

    pub fn consume(&mut self, bytes: usize) {
        self.start += bytes;
        self.consumed += bytes as u64;
    }

    /// Why the input ended early: a compressed stream before its end marker or damaged, or
    /// a read error (None: it was read to its end).
    pub fn cut_short(&self) -> Option<&str> {
        self.cut_short.as_deref()
    }

    /// The warning for an input that ended early, if it did.
    pub fn warning(&self) -> Option<String> {
        let why = self.cut_short.as_deref()?;
        Some(match self.compression {
            Some(_) => format!("compressed capture cut short ({why}); analysed what it held"),
            None => format!("capture cut short ({why}); analysed what was read before it"),
        })
    }

    /// Read until at least `bytes` are available or the input ends.
    pub fn fill_to(&mut self, bytes: usize) {
        while self.available().len() < bytes && !self.ended {
            self.refill();
        }
    }

    /// Read more after what is available: the unconsumed bytes move to the front, and the
    /// buffer doubles only when they fill it (a record larger than the buffer). A damaged
    /// compressed stream ends the input there, saying why.
    pub fn refill(&mut self) {
        if self.ended {
            return;
        }
        if self.start > 0 {
            self.buffer.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.buffer.len() {
            self.buffer.resize(self.buffer.len() * 2, 0);
        }
        loop {
            match self.input.read(&mut self.buffer[self.end..]) {
                Ok(0) => self.ended = true,
                Ok(read) => self.end += read,
                Err(error) if error.kind() == ErrorKind::Interrupted => continue,
                Err(error) => {
                    self.ended = true;
                    self.cut_short = Some(self.why_cut_short(&error));
                }
            }
            return;
        }
    }

    fn why_cut_short(&self, error: &io::Error) -> String {
        match self.compression {
            Some(name) if error.kind() == ErrorKind::UnexpectedEof => {
                format!("the {name} stream ends before its end marker")
            }
            Some(name) => format!("damaged {name} data ({error})"),
            None => format!("read error ({})", why_unreadable(error)),
        }
    }
}

fn why_unreadable(error: &io::Error) -> String {
    match error.kind() {
        ErrorKind::NotFound => "no such file".to_string(),
        ErrorKind::PermissionDenied => "permission denied".to_string(),
        ErrorKind::IsADirectory => "is a directory, not a capture file".to_string(),
        _ => error.to_string(),
    }
}
