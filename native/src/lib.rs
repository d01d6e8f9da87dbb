//! Compiled hot paths of the `streams` package, each with a Python twin it must agree with.
//!
//! * [`EventScanner::scan`]: stage 1's per-record decode and validation of a JSON event
//!   envelope, with the event's identity hash. It accepts only what it is sure of (the
//!   envelope every producer of this project writes) and answers `None` for anything
//!   else, which the Python path then decodes, validates and dead-letters exactly as
//!   before. It never refuses a record on its own.
//! * [`canonical_key`]: the canonical bytes of a routing key, `None` where Python must
//!   decide (errors, unusual types).
//! * [`Murmur2Placer`]: Kafka's partition of a key, `toPositive(murmur2(key)) % n`.
//!
//! `streams/core/native.py` loads this module, checks it against the Python twins at
//! import and falls back to them when it is missing or disagrees.

use pyo3::prelude::*;
use pyo3::intern;
use pyo3::types::{PyBytes, PyDict, PyFloat, PyInt, PyString, PyTuple, PyType};
use std::borrow::Cow;
use std::fmt::Write as _;
use xxhash_rust::xxh3::xxh3_64_with_seed;

const MAX_KEY_BYTES: usize = 1024;
const MAX_DEPTH: u32 = 64;

// --- a strict JSON reader for one flat object --------------------------------------------------

enum Num {
    Int(i64),
    Float(f64),
}

struct Reader<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Reader<'a> {
    fn ws(&mut self) {
        while self.i < self.b.len() && matches!(self.b[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        if self.i < self.b.len() && self.b[self.i] == c {
            self.i += 1;
            Some(())
        } else {
            None
        }
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    /// A JSON string (the input is valid UTF-8); None for a control character, a bad
    /// escape or any surrogate escape (Python decides those).
    fn string(&mut self) -> Option<Cow<'a, str>> {
        self.eat(b'"')?;
        let start = self.i;
        let b = self.b;
        while self.i < b.len() {
            match b[self.i] {
                b'"' => {
                    // SAFETY of the slice: the whole input is valid UTF-8 and '"' is ASCII.
                    let s = std::str::from_utf8(&b[start..self.i]).ok()?;
                    self.i += 1;
                    return Some(Cow::Borrowed(s));
                }
                b'\\' => return self.escaped(start),
                c if c < 0x20 => return None,
                _ => self.i += 1,
            }
        }
        None
    }

    fn escaped(&mut self, start: usize) -> Option<Cow<'a, str>> {
        let b = self.b;
        let mut out = String::from(std::str::from_utf8(&b[start..self.i]).ok()?);
        while self.i < b.len() {
            let c = b[self.i];
            match c {
                b'"' => {
                    self.i += 1;
                    return Some(Cow::Owned(out));
                }
                b'\\' => {
                    let e = *b.get(self.i + 1)?;
                    self.i += 2;
                    match e {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => {
                            let hex = std::str::from_utf8(b.get(self.i..self.i + 4)?).ok()?;
                            if !hex.bytes().all(|h| h.is_ascii_hexdigit()) {
                                return None;
                            }
                            let code = u32::from_str_radix(hex, 16).ok()?;
                            self.i += 4;
                            out.push(char::from_u32(code)?); // None for a surrogate
                        }
                        _ => return None,
                    }
                }
                c if c < 0x20 => return None,
                _ => {
                    // Copy a run of plain bytes at once (valid UTF-8: the run ends at ASCII).
                    let run = self.i;
                    while self.i < b.len() && !matches!(b[self.i], b'"' | b'\\') && b[self.i] >= 0x20 {
                        self.i += 1;
                    }
                    out.push_str(std::str::from_utf8(&b[run..self.i]).ok()?);
                }
            }
        }
        None
    }

    /// Skips one or more digits; None if there is none.
    fn digits(&mut self) -> Option<()> {
        let first = self.i;
        while self.i < self.b.len() && self.b[self.i].is_ascii_digit() {
            self.i += 1;
        }
        (self.i > first).then_some(())
    }

    /// A JSON number by the grammar's rules; None past i64 or to a non-finite double.
    fn number(&mut self) -> Option<Num> {
        let b = self.b;
        let start = self.i;
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        match self.peek()? {
            b'0' => self.i += 1,
            b'1'..=b'9' => self.digits()?,
            _ => return None,
        }
        let mut float = false;
        if self.peek() == Some(b'.') {
            float = true;
            self.i += 1;
            self.digits()?;
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            float = true;
            self.i += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.i += 1;
            }
            self.digits()?;
        }
        let text = std::str::from_utf8(&b[start..self.i]).ok()?;
        if float {
            let x: f64 = text.parse().ok()?;
            x.is_finite().then_some(Num::Float(x))
        } else {
            text.parse::<i64>().ok().map(Num::Int)
        }
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        if self.b.get(self.i..self.i + word.len())? == word {
            self.i += word.len();
            Some(())
        } else {
            None
        }
    }

    /// Any JSON value, checked and skipped.
    fn skip(&mut self, depth: u32) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        match self.peek()? {
            b'"' => self.string().map(drop),
            b'{' => self.object_of(|r| r.skip(depth + 1)),
            b'[' => {
                self.i += 1;
                self.ws();
                if self.eat(b']').is_some() {
                    return Some(());
                }
                loop {
                    self.ws();
                    self.skip(depth + 1)?;
                    self.ws();
                    if self.eat(b',').is_none() {
                        return self.eat(b']');
                    }
                }
            }
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            _ => self.number().map(drop),
        }
    }

    /// An object whose member values ``value`` reads (and checks).
    fn object_of(&mut self, mut value: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        self.ws();
        if self.eat(b'}').is_some() {
            return Some(());
        }
        loop {
            self.ws();
            self.string()?;
            self.ws();
            self.eat(b':')?;
            self.ws();
            value(self)?;
            self.ws();
            if self.eat(b',').is_none() {
                return self.eat(b'}');
            }
        }
    }
}

/// The envelope's fields as the scan reads them.
struct Envelope<'a> {
    id: Cow<'a, str>,
    ts: i64,
    key: Cow<'a, str>,
    value: Option<Num>,
}

const F_ID: u8 = 1;
const F_KIND: u8 = 2;
const F_TS: u8 = 4;
const F_KEY: u8 = 8;
const F_VALUE: u8 = 16;
const F_ATTRS: u8 = 32;

fn read_envelope(payload: &[u8]) -> Option<Envelope<'_>> {
    std::str::from_utf8(payload).ok()?; // orjson refuses invalid UTF-8 anywhere: so does the scan
    let mut r = Reader { b: payload, i: 0 };
    let (mut id, mut ts, mut key, mut value) = (None, None, None, None);
    let mut seen = 0u8;
    r.ws();
    r.eat(b'{')?;
    r.ws();
    if r.eat(b'}').is_none() {
        loop {
            r.ws();
            let name = r.string()?;
            r.ws();
            r.eat(b':')?;
            r.ws();
            let bit = match name.as_ref() {
                "id" => {
                    id = Some(r.string()?);
                    F_ID
                }
                "id_kind" => {
                    let kind = r.string()?;
                    if kind != "uuid7" && kind != "snowflake" {
                        return None;
                    }
                    F_KIND
                }
                "ts_ms" => {
                    match r.number()? {
                        Num::Int(t) => ts = Some(t),
                        Num::Float(_) => return None,
                    }
                    F_TS
                }
                "key" => {
                    key = Some(r.string()?);
                    F_KEY
                }
                "value" => {
                    if r.peek()? == b'n' {
                        r.literal(b"null")?;
                    } else {
                        value = Some(r.number()?);
                    }
                    F_VALUE
                }
                "attributes" => {
                    r.object_of(|r| r.string().map(drop))?; // a map of strings
                    F_ATTRS
                }
                "-type" => return None, // fastavro's record-name marker: Python judges it
                _ => {
                    r.skip(0)?;
                    0
                }
            };
            if seen & bit != 0 {
                return None; // a field given twice: Python decides which copy counts
            }
            seen |= bit;
            r.ws();
            if r.eat(b',').is_none() {
                r.eat(b'}')?;
                break;
            }
        }
    }
    r.ws();
    if r.i != payload.len() {
        return None;
    }
    // value and attributes have defaults; the other four must be there.
    if seen & (F_ID | F_KIND | F_TS | F_KEY) != F_ID | F_KIND | F_TS | F_KEY {
        return None;
    }
    Some(Envelope { id: id?, ts: ts?, key: key?, value })
}

// --- IDs, keys and the identity hash ----------------------------------------------------------

fn hex_value(c: u8) -> Option<u128> {
    match c {
        b'0'..=b'9' => Some((c - b'0') as u128),
        b'a'..=b'f' => Some((c - b'a' + 10) as u128),
        b'A'..=b'F' => Some((c - b'A' + 10) as u128),
        _ => None,
    }
}

/// The number of a UUIDv7 in canonical text (lower-case 8-4-4-4-12, version 7, variant 10).
fn canonical_uuid7(text: &[u8]) -> Option<u128> {
    let canonical = text.len() == 36
        && !text.iter().any(u8::is_ascii_uppercase)
        && text[14] == b'7'
        && matches!(text[19], b'8' | b'9' | b'a' | b'b');
    canonical.then(|| uuid_text_bytes(text)).flatten().map(u128::from_be_bytes)
}

/// Python's whitespace among ASCII characters (what `str.strip()` removes).
fn is_py_ascii_space(c: u8) -> bool {
    matches!(c, 9..=13 | 28..=32)
}

/// Reads stage 1's JSON events; the Snowflake layout is the worker's.
#[pyclass(frozen)]
struct EventScanner {
    total_bits: u32,
    timestamp_shift: u32,
    epoch_ms: i128,
    time_unit_ms: i128,
    max_datetime_ms: i128,
}

#[pymethods]
impl EventScanner {
    #[new]
    fn new(total_bits: u32, timestamp_shift: u32, epoch_ms: i64, time_unit_ms: i64, max_datetime_ms: i64) -> PyResult<Self> {
        if total_bits == 0 || total_bits > 64 || timestamp_shift >= total_bits || time_unit_ms < 1 {
            return Err(pyo3::exceptions::PyValueError::new_err("EventScanner: not a Snowflake layout"));
        }
        Ok(EventScanner {
            total_bits,
            timestamp_shift,
            epoch_ms: epoch_ms as i128,
            time_unit_ms: time_unit_ms as i128,
            max_datetime_ms: max_datetime_ms as i128,
        })
    }

    /// `(ts_ms, key, value, identity, plain_id)` of a well-formed event that stage 1
    /// accepts, or None: anything else (also every record Python would dead-letter) is
    /// left to the Python path.
    fn scan<'py>(&self, py: Python<'py>, payload: &[u8]) -> Option<Bound<'py, PyTuple>> {
        let env = read_envelope(payload)?;
        let id = env.id.as_bytes();
        let (number, seed, plain) = if let Some(n) = canonical_uuid7(id) {
            if (n >> 80) as i128 > self.max_datetime_ms {
                return None;
            }
            (n, 0u64, (n as u64) ^ ((n >> 64) as u64))
        } else if !id.is_empty() && id.len() <= 20 && id.iter().all(u8::is_ascii_digit) {
            let n: u128 = env.id.parse().ok()?;
            if n >> self.total_bits != 0 {
                return None;
            }
            let ms = self.epoch_ms + ((n >> self.timestamp_shift) as i128) * self.time_unit_ms;
            if ms > self.max_datetime_ms {
                return None;
            }
            (n, 1u64, n as u64)
        } else {
            return None;
        };
        let key = env.key.as_ref();
        if key.len() > MAX_KEY_BYTES || !key.bytes().any(|c| c.is_ascii() && !is_py_ascii_space(c)) {
            return None;
        }
        let mut text = String::with_capacity(64 + key.len());
        let _ = write!(text, "{}|{}|", number, env.ts);
        let value: PyObject = match env.value {
            None => {
                text.push_str("None");
                py.None()
            }
            Some(Num::Int(v)) => {
                let _ = write!(text, "{}", v);
                v.into_pyobject(py).ok()?.into_any().unbind()
            }
            Some(Num::Float(v)) => {
                // Python's own repr: the shortest digits, ties broken as Python breaks them.
                let number = PyFloat::new(py, v);
                text.push_str(number.repr().ok()?.to_str().ok()?);
                number.into_any().unbind()
            }
        };
        text.push('|');
        text.push_str(key);
        let identity = xxh3_64_with_seed(text.as_bytes(), seed);
        let items: [PyObject; 5] = [
            env.ts.into_pyobject(py).ok()?.into_any().unbind(),
            PyString::new(py, key).into_any().unbind(),
            value,
            identity.into_pyobject(py).ok()?.into_any().unbind(),
            plain.into_pyobject(py).ok()?.into_any().unbind(),
        ];
        PyTuple::new(py, items).ok()
    }
}

// --- routing keys and Kafka's murmur2 ------------------------------------------------------------

/// The 16 bytes of UUID-shaped ASCII text (32 hex; 8-4-4-4-12; that in braces; after
/// `urn:uuid:` in any case), or None.
fn uuid_text_bytes(text: &[u8]) -> Option<[u8; 16]> {
    let body = match text.len() {
        45 if text[..9].eq_ignore_ascii_case(b"urn:uuid:") => &text[9..],
        38 if text[0] == b'{' && text[37] == b'}' => &text[1..37],
        32 | 36 => text,
        _ => return None,
    };
    let mut n: u128 = 0;
    let mut digits = 0;
    for (i, &c) in body.iter().enumerate() {
        if body.len() == 36 && matches!(i, 8 | 13 | 18 | 23) {
            if c != b'-' {
                return None;
            }
            continue;
        }
        n = (n << 4) | hex_value(c)?;
        digits += 1;
    }
    (digits == 32).then(|| n.to_be_bytes())
}

/// The canonical bytes of a routing key (str, bytes or int), or None where the Python
/// rule must decide: an error to raise, a type it converts, an int past 64 bits.
#[pyfunction]
fn canonical_key<'py>(py: Python<'py>, value: &Bound<'py, PyAny>) -> Option<Bound<'py, PyAny>> {
    if let Ok(text) = value.downcast_exact::<PyString>() {
        let s = text.to_str().ok()?; // a lone surrogate: Python raises
        if let Some(raw) = uuid_text_bytes(s.as_bytes()) {
            return Some(PyBytes::new(py, &raw).into_any());
        }
        if s.is_empty() || s.len() > MAX_KEY_BYTES {
            return None;
        }
        return Some(PyBytes::new(py, s.as_bytes()).into_any());
    }
    if let Ok(raw) = value.downcast_exact::<PyBytes>() {
        let n = raw.as_bytes().len();
        return (n > 0 && n <= MAX_KEY_BYTES).then(|| value.clone());
    }
    if value.downcast_exact::<PyInt>().is_ok() {
        let n: i64 = value.extract().ok()?;
        return Some(PyBytes::new(py, n.to_string().as_bytes()).into_any());
    }
    None
}

/// Kafka's murmur2 (`org.apache.kafka.common.utils.Utils.murmur2`), as an unsigned 32-bit value.
fn murmur2(data: &[u8]) -> u32 {
    const M: u32 = 0x5bd1_e995;
    let mut h: u32 = 0x9747_b28c ^ (data.len() as u32);
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> 24;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M) ^ k;
    }
    let tail = chunks.remainder();
    if tail.len() == 3 {
        h ^= (tail[2] as u32) << 16;
    }
    if tail.len() >= 2 {
        h ^= (tail[1] as u32) << 8;
    }
    if !tail.is_empty() {
        h ^= tail[0] as u32;
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h
}

/// Kafka's murmur2 of ``data`` as the unsigned 32-bit int ``murmurhash2(data, seed)`` gives.
#[pyfunction]
fn murmur2_unsigned(data: &[u8]) -> u32 {
    murmur2(data)
}

/// ``placer(key_bytes) -> (murmur2(key) & 0x7fffffff) % partitions``: Kafka's rule.
#[pyclass(frozen)]
struct Murmur2Placer {
    partitions: u32,
}

#[pymethods]
impl Murmur2Placer {
    #[new]
    fn new(partitions: u32) -> PyResult<Self> {
        if partitions == 0 {
            return Err(pyo3::exceptions::PyValueError::new_err("Murmur2Placer needs at least one partition"));
        }
        Ok(Murmur2Placer { partitions })
    }

    fn __call__(&self, key: &[u8]) -> u32 {
        (murmur2(key) & 0x7fff_ffff) % self.partitions
    }
}

/// Lamping and Veach's jump consistent hash, as ``streams.core.routing.hashing.jump_hash``.
fn jump(mut key: u64, n: i64) -> i64 {
    let (mut b, mut j) = (-1i64, 0i64);
    while j < n {
        b = j;
        key = key.wrapping_mul(2_862_933_555_777_941_757).wrapping_add(1);
        j = ((b + 1) as f64 * (2_147_483_648.0 / (((key >> 33) + 1) as f64))) as i64;
    }
    b
}

/// ``placer(key_bytes) -> jump_hash(hash(key), n)`` with ``hash`` xxh3 (64-bit, seed 0) or
/// murmur2 (``& 0x7fffffff``): the ``jump`` placements of ``streams.core.routing.placement``.
#[pyclass(frozen)]
struct JumpPlacer {
    partitions: i64,
    xxh3: bool,
}

#[pymethods]
impl JumpPlacer {
    #[new]
    fn new(partitions: i64, hash: &str) -> PyResult<Self> {
        if partitions < 1 || !matches!(hash, "xxh3" | "murmur2") {
            return Err(pyo3::exceptions::PyValueError::new_err("JumpPlacer needs partitions >= 1 and hash xxh3 or murmur2"));
        }
        Ok(JumpPlacer { partitions, xxh3: hash == "xxh3" })
    }

    fn __call__(&self, key: &[u8]) -> i64 {
        let h = if self.xxh3 { xxh3_64_with_seed(key, 0) } else { (murmur2(key) & 0x7fff_ffff) as u64 };
        jump(h, self.partitions)
    }
}

// --- the router's per-event path -----------------------------------------------------------------

/// Builds an instance of the tuple subclass ``cls`` (a NamedTuple) from ``items`` without a
/// Python call: its own allocator, then the items, as ``tuple.__new__(cls, items)`` does.
fn new_named_tuple<'py>(py: Python<'py>, cls: &Bound<'py, PyType>, items: [Bound<'py, PyAny>; 8]) -> PyResult<Bound<'py, PyAny>> {
    use pyo3::ffi;
    unsafe {
        let alloc = ffi::PyType_GetSlot(cls.as_ptr() as *mut ffi::PyTypeObject, ffi::Py_tp_alloc);
        if alloc.is_null() {
            return Err(pyo3::exceptions::PyTypeError::new_err("RoutingDecision has no allocator"));
        }
        let alloc: ffi::allocfunc = std::mem::transmute(alloc);
        let obj = alloc(cls.as_ptr() as *mut ffi::PyTypeObject, items.len() as ffi::Py_ssize_t);
        let obj = Bound::from_owned_ptr_or_err(py, obj)?;
        for (i, item) in items.into_iter().enumerate() {
            // PyTuple_SetItem steals the reference; the new tuple's slots are empty.
            if ffi::PyTuple_SetItem(obj.as_ptr(), i as ffi::Py_ssize_t, item.into_ptr()) != 0 {
                return Err(PyErr::fetch(py));
            }
        }
        Ok(obj)
    }
}

/// ``streams.core.routing.router.Router.route`` for the router it is built for, in one call.
///
/// It reads the router's memo and hot bucket from the router's ``__dict__`` on every call
/// (``install`` and ``_resolve`` replace them) and calls back into the router's Python for
/// everything but the two common cases, a memoised key in its bucket and a new key in the
/// hot bucket: ``_resolve`` (another bucket, another map) and ``_placed`` (keys the
/// directory places). Its own state is the doorkeeper of :meth:`remember`, which stands in
/// for ``Router._remember``.
#[pyclass(frozen)]
struct RouteCore {
    state: Py<PyDict>,
    placements: Py<PyDict>,
    decision: Py<PyType>,
    memoised: Vec<Py<PyType>>,
    resolve: Py<PyAny>,
    placed: Py<PyAny>,
    check_timestamp: Py<PyAny>,
    canonical: Py<PyAny>,
    memo_size: usize,
    width_ms: i64,
    door: std::sync::Mutex<Doorkeeper>,
}

/// Which keys were routed once lately (their hashes), cleared after ``memo_size`` of them:
/// the Python doorkeeper's rule (``Router._remember``) without a Python int and a dict
/// slot per new key. The set keeps its table across clears.
struct Doorkeeper {
    seen: std::collections::HashSet<isize>,
}

impl Doorkeeper {
    /// True the first time ``h`` is offered since the last clear (it is remembered now).
    fn first_sighting(&mut self, h: isize, memo_size: usize) -> bool {
        if self.seen.contains(&h) {
            return false;
        }
        if self.seen.len() >= memo_size {
            self.seen.clear();
        }
        self.seen.insert(h);
        true
    }
}

#[pymethods]
impl RouteCore {
    /// The core of ``router`` (a ``Router`` whose directory lookup is a dict's ``get``);
    /// ``decision`` is ``RoutingDecision``, ``memoised`` the key types the memo takes.
    #[new]
    fn new<'py>(router: &Bound<'py, PyAny>, decision: Py<PyType>, memoised: Vec<Py<PyType>>,
                check_timestamp: Py<PyAny>, canonical: Py<PyAny>) -> PyResult<Self> {
        let lookup = router.getattr("_placement_lookup")?;
        Ok(RouteCore {
            state: router.getattr("__dict__")?.downcast_into::<PyDict>()?.unbind(),
            placements: lookup.getattr("__self__")?.downcast_into::<PyDict>()?.unbind(),
            decision,
            memoised,
            resolve: router.getattr("_resolve")?.unbind(),
            placed: router.getattr("_placed")?.unbind(),
            check_timestamp,
            canonical,
            memo_size: router.getattr("_memo_size")?.extract()?,
            width_ms: router.getattr("_width_ms")?.extract()?,
            door: std::sync::Mutex::new(Doorkeeper { seen: std::collections::HashSet::new() }),
        })
    }

    /// Lets the collector see the cycle a router and its core make (the router's ``__dict__`` holds the
    /// core's ``route``, the core holds that ``__dict__``): the dict's own clear then breaks it.
    fn __traverse__(&self, visit: pyo3::PyVisit<'_>) -> Result<(), pyo3::PyTraverseError> {
        visit.call(&self.state)?;
        visit.call(&self.placements)?;
        visit.call(&self.decision)?;
        for t in &self.memoised {
            visit.call(t)?;
        }
        visit.call(&self.resolve)?;
        visit.call(&self.placed)?;
        visit.call(&self.check_timestamp)?;
        visit.call(&self.canonical)
    }

    /// Forgets every key seen once (``Router.install`` starts a new doorkeeper, as it starts a new memo).
    fn forget(&self) {
        if let Ok(mut door) = self.door.lock() {
            door.seen.clear();
        }
    }

    /// ``Router._remember``: memoise ``decision`` on the key's second sighting, or at once if the key was
    /// memoised (``stale``); a first sighting is only remembered, in this core's doorkeeper.
    fn remember<'py>(&self, memo: &Bound<'py, PyDict>, key: &Bound<'py, PyAny>, decision: &Bound<'py, PyAny>,
                     stale: &Bound<'py, PyAny>) -> PyResult<()> {
        if stale.is_none() {
            let h = key.hash()?;
            let mut door = self.door.lock().map_err(|_| pyo3::exceptions::PyRuntimeError::new_err("doorkeeper poisoned"))?;
            if door.first_sighting(h, self.memo_size) {
                return Ok(());
            }
        }
        if memo.len() >= self.memo_size {
            memo.clear();
        }
        memo.set_item(key, decision)
    }

    #[pyo3(signature = (key, ts_ms, event_id=None))]
    fn route<'py>(&self, py: Python<'py>, key: &Bound<'py, PyAny>, ts_ms: &Bound<'py, PyAny>, event_id: Option<&Bound<'py, PyAny>>) -> PyResult<Bound<'py, PyAny>> {
        let ts_obj = if ts_ms.is_exact_instance_of::<PyInt>() { ts_ms.clone() } else { self.check_timestamp.bind(py).call1((ts_ms,))? };
        let ts: Option<i64> = ts_obj.extract().ok(); // None past 64 bits: _resolve raises for it
        let state = self.state.bind(py);
        let memo = state.get_item(intern!(py, "_memo"))?.ok_or_else(|| pyo3::exceptions::PyAttributeError::new_err("_memo"))?;
        let memo = memo.downcast_into::<PyDict>()?;
        let key_type = key.get_type();
        let memoisable = self.memoised.iter().any(|t| t.bind(py).is(&key_type));
        let found = if memoisable { memo.get_item(key)? } else { None };
        let none = py.None().into_bound(py);
        let decision = match (found, ts) {
            (None, Some(ts)) => {
                let hot = state.get_item(intern!(py, "_hot"))?.ok_or_else(|| pyo3::exceptions::PyAttributeError::new_err("_hot"))?;
                let hot = hot.downcast_into::<PyTuple>()?;
                let start: i64 = hot.get_item(0)?.extract()?;
                let end: i64 = hot.get_item(1)?.extract()?;
                if start <= ts && ts < end {
                    let kb = match canonical_key(py, key) {
                        Some(kb) => kb,
                        None => self.canonical.bind(py).call1((key,))?,
                    };
                    let placer = hot.get_item(3)?;
                    let partition = place(py, &placer, &kb)?;
                    let decision = new_named_tuple(py, self.decision.bind(py), [
                        hot.get_item(2)?, partition, kb, hot.get_item(4)?, hot.get_item(0)?, hot.get_item(5)?,
                        hot.get_item(6)?, (-1i64).into_pyobject(py)?.into_any(),
                    ])?;
                    if self.memo_size > 0 && memoisable {
                        self.remember(&memo, key, &decision, &none)?;
                    }
                    decision
                } else {
                    self.resolve.bind(py).call1((key, &ts_obj, &none))?
                }
            }
            (None, None) => self.resolve.bind(py).call1((key, &ts_obj, &none))?,
            (Some(decision), ts) => {
                let start: i64 = decision.get_item(4)?.extract()?;
                match ts {
                    Some(ts) if ts >= start && ts - start < self.width_ms => decision,
                    _ => self.resolve.bind(py).call1((key, &ts_obj, &decision))?,
                }
            }
        };
        let kb = decision.get_item(2)?;
        match self.placements.bind(py).get_item(&kb)? {
            None => Ok(decision),
            Some(placement) => self.placed.bind(py).call1((&decision, placement, event_id.unwrap_or(&none))),
        }
    }
}

/// ``placer(kb)``: a compiled placer's rule without a call, any other placer called.
fn place<'py>(py: Python<'py>, placer: &Bound<'py, PyAny>, kb: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    if let Ok(p) = placer.downcast::<Murmur2Placer>() {
        if let Ok(raw) = kb.downcast::<PyBytes>() {
            return Ok(p.get().__call__(raw.as_bytes()).into_pyobject(py)?.into_any());
        }
    } else if let Ok(p) = placer.downcast::<JumpPlacer>() {
        if let Ok(raw) = kb.downcast::<PyBytes>() {
            return Ok(p.get().__call__(raw.as_bytes()).into_pyobject(py)?.into_any());
        }
    }
    placer.call1((kb,))
}

#[pymodule]
fn streams_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("ABI", 1)?;
    m.add_class::<EventScanner>()?;
    m.add_class::<Murmur2Placer>()?;
    m.add_class::<JumpPlacer>()?;
    m.add_class::<RouteCore>()?;
    m.add_function(wrap_pyfunction!(canonical_key, m)?)?;
    m.add_function(wrap_pyfunction!(murmur2_unsigned, m)?)?;
    Ok(())
}
