//! The AdmissionReview v1 codec: decode a review into a borrowed engine request, encode the
//! engine's outcome as the review response kube-apiserver expects.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{FromRequest, Request as HttpRequest};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use celgate_cel::json_tape::{Declined, Footprint, Meter, RESERVED_NODES, Scan, Tally};
use celgate_engine::apivalidation::FieldError;
use celgate_engine::json_text::{self, JsonError};
use celgate_engine::received::{MaybeRequest, ReceivedRequest};
use celgate_engine::validate::{Outcome, VALIDATION_FAILURE_KEY};
use celgate_engine::{MutationOutcome, Request};
use celgate_snapshot::DispatchError;
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use thiserror::Error;

use crate::limits::{
    Budget, Charge, HEAVY_BODY_BYTES, HEAVY_DEPTH, NoTurn, Refused, Turn, overloaded,
};

/// The deepest nesting of arrays and objects a review may hold: an object as deep as
/// kube-apiserver decodes ([`json_text::MAX_OBJECT_DEPTH`]), wrapped in the review and its request.
pub const MAX_REVIEW_DEPTH: usize = json_text::MAX_OBJECT_DEPTH + 2;

/// Why a body is not an AdmissionReview celgate can answer (HTTP 400).
#[derive(Debug, Error)]
pub enum ReviewError {
    /// The body is not JSON.
    #[error("request body is not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// The body nests deeper than any object kube-apiserver accepts.
    #[error("request body is nested deeper than {MAX_REVIEW_DEPTH} levels")]
    TooDeep,
    /// The JSON is not an admission.k8s.io/v1 AdmissionReview.
    #[error(
        "expected an AdmissionReview of apiVersion admission.k8s.io/v1, got apiVersion {api_version:?} kind {kind:?}"
    )]
    NotAReview {
        /// The apiVersion found.
        api_version: String,
        /// The kind found.
        kind: String,
    },
    /// The review has no request.
    #[error("AdmissionReview has no request")]
    NoRequest,
}

/// A review's top-level members, as far as celgate reads them.
#[derive(Default)]
struct Wire {
    api_version: Option<Value>,
    kind: Option<Value>,
    request: Option<ReceivedRequest>,
}

impl<'de> Deserialize<'de> for Wire {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(WireVisitor { shared: None })
    }
}

/// Reads a review; with `shared`, the text being read, its request's `object` is written as
/// a tape in the same pass (see [`MaybeRequest::seed`]).
struct WireVisitor<'t> {
    shared: Option<&'t Arc<str>>,
}

impl<'de> Visitor<'de> for WireVisitor<'de> {
    type Value = Wire;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an AdmissionReview object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Wire, A::Error> {
        let mut wire = Wire::default();
        // A repeated member counts once, the last time, as when decoding into a `Value`.
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "apiVersion" => wire.api_version = Some(map.next_value()?),
                "kind" => wire.kind = Some(map.next_value()?),
                "request" => {
                    wire.request = match self.shared {
                        Some(text) => map.next_value_seed(MaybeRequest::seed(text))?.0,
                        None => map.next_value::<MaybeRequest>()?.0,
                    }
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(wire)
    }
}

/// Parses a body and checks it is an AdmissionReview v1 with a request. The request's
/// `object` is read as `object` says. For a tape, celgate's scanner reads the review and writes
/// `oldObject`'s tape too; where it declines, serde_json's pass reads the review and keeps
/// `oldObject` as text, decoded when first read (and so is `object` when that pass cannot read
/// it either). As text, both are kept as text. Members nested deeper
/// than serde_json's default of 128 levels are read as kube-apiserver reads them (up to
/// [`MAX_REVIEW_DEPTH`]), on a stack that grows as the nesting needs.
pub fn decode(body: &[u8], object: ObjectRead) -> Result<ReceivedRequest, ReviewError> {
    decode_with(body, object, true)
}

/// [`decode`] of a review for validation with serde_json's pass alone, as for a review
/// celgate's scanner declines: for `benches/hand_written.rs`, which weighs the scanner against
/// it on the same body. The server does not call it.
#[doc(hidden)]
pub fn decode_without_scanner(body: &[u8]) -> Result<ReceivedRequest, ReviewError> {
    decode_with(body, ObjectRead::Tape, false)
}

/// [`decode`], with celgate's scanner tried first when `scanner`.
fn decode_with(
    body: &[u8],
    object: ObjectRead,
    scanner: bool,
) -> Result<ReceivedRequest, ReviewError> {
    // Text checked to be UTF-8 once here is not checked again string by string, nor when the
    // objects are decoded; a body that is not UTF-8 gets serde_json's error from the bytes.
    let text = std::str::from_utf8(body).ok();
    // One pass that also writes the objects' tapes: the scanner, else serde_json's. Each fails
    // on whatever the object holds that decoding it would (a number out of range, nesting past
    // 128 levels): such a review, and any other that fails, is read again below, where the
    // object is kept as text and those errors arise only if a policy reads it.
    if let (Some(text), true) = (text, object.tape()) {
        let shared: Arc<str> = Arc::from(text);
        if let Some(Ok(wire)) = scanner.then(|| scanned(&mut Scan::new(&shared))) {
            return checked(wire);
        }
        let mut de = serde_json::Deserializer::from_str(&shared);
        let read = WireVisitor {
            shared: Some(&shared),
        };
        if let Ok(wire) = de
            .deserialize_any(read)
            .and_then(|wire| de.end().map(|()| wire))
        {
            return checked(wire);
        }
    }
    let read = match text {
        Some(text) => serde_json::from_str::<Wire>(text),
        None => serde_json::from_slice::<Wire>(body),
    };
    let wire = match read {
        Ok(wire) => wire,
        // serde_json says so only in its message; the fast path above serves every review of
        // ordinary depth, this one the rest.
        Err(e) if e.to_string().starts_with("recursion limit exceeded") => decode_deep(body)?,
        Err(e) => return Err(e.into()),
    };
    checked(wire)
}

/// Reads a review with `scan`, celgate's own scanner, its request's `object` and `oldObject` as
/// tapes (see [`ReceivedRequest::scan`]). [`Declined`] for text it leaves to serde_json, and
/// for a review that is not an object, whose error serde_json's pass gives.
///
/// It pays about 5 µs per validating review: on the realistic 6 KB Pod create review it
/// decodes in 27.4 µs where serde_json's pass alone ([`decode_without_scanner`]) takes 33.7 µs
/// (medians of 11 alternating rounds, ×1.23; ×1.15 and ×1.46 in two other runs, minimums
/// ×1.12 to ×1.26). Decode, decide and encode take 85.0 against 89.6 µs (×1.06; ×1.02 and
/// ×0.93 in the other runs): within the noise of the 2 shared cores measured on.
/// `cargo bench -p celgate-webhook --bench hand_written`.
fn scanned<T: Tally>(scan: &mut Scan<'_, T>) -> Result<Wire, Declined> {
    let mut wire = Wire::default();
    // A repeated member counts once, the last time, as when decoding into a `Value`.
    let object = scan.members(|scan, key| {
        match key {
            "apiVersion" => wire.api_version = Some(scan.json()?),
            "kind" => wire.kind = Some(scan.json()?),
            "request" => wire.request = ReceivedRequest::scan(scan)?,
            _ => scan.skip()?,
        }
        Ok(())
    })?;
    if !object {
        return Err(Declined);
    }
    scan.end()?;
    Ok(wire)
}

/// The request of a review that is an AdmissionReview v1 with a request.
fn checked(wire: Wire) -> Result<ReceivedRequest, ReviewError> {
    fn field(v: &Option<Value>) -> &str {
        v.as_ref().and_then(Value::as_str).unwrap_or_default()
    }
    let (api_version, kind) = (field(&wire.api_version), field(&wire.kind));
    if api_version != "admission.k8s.io/v1" || kind != "AdmissionReview" {
        return Err(ReviewError::NotAReview {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
        });
    }
    wire.request.ok_or(ReviewError::NoRequest)
}

/// Parses a body nested deeper than serde_json's default limit, up to [`MAX_REVIEW_DEPTH`].
fn decode_deep(body: &[u8]) -> Result<Wire, ReviewError> {
    let mut review = match json_text::parse(body, MAX_REVIEW_DEPTH) {
        Ok(review) => review,
        Err(JsonError::TooDeep(_)) => return Err(ReviewError::TooDeep),
        Err(JsonError::Syntax(e)) => return Err(e.into()),
    };
    let mut take = |key: &str| review.as_object_mut().and_then(|m| m.remove(key));
    Ok(Wire {
        api_version: take("apiVersion"),
        kind: take("kind"),
        request: take("request")
            .filter(Value::is_object)
            .map(ReceivedRequest::from_value),
    })
}

/// How [`decode`] reads a review's `object`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum ObjectRead {
    /// As a tape, in the pass that reads the review: for validation, whose CEL reads the
    /// object in place.
    Tape,
    /// As a tape, as for validation: for mutation, whose run reads the object in place and
    /// decodes into a `serde_json::Value` only the members it changes (beside what an object
    /// selector decodes).
    TapeToMutate,
    /// Kept as text, decoded when first read: for policy writes, which read a
    /// `serde_json::Value` of it.
    Text,
}

impl ObjectRead {
    /// How the handlers' [`Review`] reads: by the variant's number.
    const fn of(read: u8) -> Self {
        match read {
            0 => ObjectRead::Tape,
            1 => ObjectRead::TapeToMutate,
            _ => ObjectRead::Text,
        }
    }

    /// Whether the object is read as a tape in the review's pass.
    fn tape(self) -> bool {
        matches!(self, ObjectRead::Tape | ObjectRead::TapeToMutate)
    }
}

/// A decoded AdmissionReview v1 with a request, as a handler argument, its `object` read as
/// `READ` says (an [`ObjectRead`] by its number), with what it holds of the in-flight budget
/// ([`Held`]). A body that is not one is answered with 400 and what is wrong; one whose
/// decoding would build more than the whole budget, 413; one the budget has no room for now,
/// 429.
#[derive(Debug)]
pub struct Review<const READ: u8>(pub ReceivedRequest, pub Held);

/// A review for validating policies: its `object` read as a tape.
pub type ValidationReview = Review<{ ObjectRead::Tape as u8 }>;

/// A review for mutating policies: its `object` read as a tape, to mutate.
pub type MutatingReview = Review<{ ObjectRead::TapeToMutate as u8 }>;

/// A review for policy writes: its `object` kept as text.
pub type TextReview = Review<{ ObjectRead::Text as u8 }>;

/// What a decoded review holds until it is decided: its share of the in-flight bytes (what
/// decoding built), and for a heavy review its turn.
#[derive(Debug)]
pub struct Held {
    _charge: Option<Charge>,
    /// Whether the review is decided on the blocking pool, and its turn.
    heavy: bool,
    _turn: Option<Turn>,
}

impl Held {
    /// Runs `decide` for the review, holding its share of the budget to the end: on the
    /// blocking pool for a heavy review (a large or deep body, see
    /// [`HEAVY_BODY_BYTES`](crate::limits::HEAVY_BODY_BYTES)), so that it never stalls the
    /// worker threads that accept, handshake and answer small reviews; here for the rest.
    pub async fn decide<F>(self, decide: F) -> Response
    where
        F: Future<Output = Response> + Send + 'static,
    {
        if !self.heavy {
            let response = decide.await;
            drop(self);
            return response;
        }
        let runtime = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || {
            let response = runtime.block_on(decide);
            drop(self);
            response
        })
        .await
        .unwrap_or_else(|e| {
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("internal error deciding the request: {e}\n"),
            )
                .into_response()
        })
    }
}

/// Bytes decoding a review takes beyond its body, at most, from its body's length and what
/// its text holds ([`Footprint`]), read as `read` says: copies of the text (the text tapes
/// share, an object kept as text), the tapes of the object and old object with what they
/// reserve, and the `serde_json::Value`s a decision may build beside them (the request's
/// other members, the object decoded for object selectors, and for mutation the copy it
/// changes), each with its arrays' and maps' allocations. The constants are the sizes of
/// those parts, with room for vectors that grow by doubling; `webhook/tests/decode_cost.rs`
/// checks that they cover the peak heap of decoding reviews of every shape.
pub fn decode_cost(body: usize, footprint: &Footprint, read: ObjectRead) -> usize {
    /// A tape's node (16 bytes), slot and the builder's stack (4 each), doubled for growth.
    const TAPE_VALUE: usize = 48;
    /// A tape's key slots (8 bytes) and the builder's entry (24), doubled for growth.
    const TAPE_MEMBER: usize = 64;
    /// A decoded string's own allocation, beside its bytes.
    const STRING: usize = 32;
    /// What the object's and old object's tapes reserve before they are written, at most.
    const TAPE_RESERVED: usize = 2 * RESERVED_NODES * 20;
    /// A `serde_json::Value` (32 bytes), doubled for its array's growth.
    const JSON_VALUE: usize = 64;
    /// A non-empty array's first allocation (room for 4 values).
    const JSON_ARRAY: usize = 128;
    /// A non-empty map's first node (a B-tree leaf of 11 entries).
    const JSON_OBJECT: usize = 640;
    /// A map entry's share of its nodes, when a map outgrows one.
    const JSON_MEMBER: usize = 160;
    // Serde's pass keeps the objects as text (a copy) where the scanner declines, and a tape
    // read from text later copies it again.
    let (text_copies, trees) = match read {
        ObjectRead::Tape => (3, 1),
        ObjectRead::TapeToMutate => (3, 2),
        ObjectRead::Text => (2, 2),
    };
    let f = footprint;
    let tape = f.values * TAPE_VALUE + f.members * TAPE_MEMBER + f.strings * STRING;
    let tree = f.values * JSON_VALUE
        + f.arrays * JSON_ARRAY
        + f.objects * JSON_OBJECT
        + f.members * JSON_MEMBER
        + f.strings * STRING
        + body;
    body.saturating_mul(text_copies)
        .saturating_add(TAPE_RESERVED.min(5 * body))
        .saturating_add(tape)
        .saturating_add(tree.saturating_mul(trees))
}

/// Why a body read was not decoded.
enum Undecoded {
    /// The budget has no room for what decoding it would build.
    Refused(Refused, usize, Footprint),
    /// It is not a review celgate can answer.
    Invalid(ReviewError),
    /// It nests too deep to be decoded on a worker thread ([`HEAVY_DEPTH`]).
    Deep,
}

impl Undecoded {
    /// The answer: 413 when the budget could never take it, 429 when the reviews in flight
    /// hold too much of it now, 400 when it is not a review.
    fn response(self) -> Response {
        let (refused, body, footprint) = match self {
            Undecoded::Refused(refused, body, footprint) => (refused, body, footprint),
            Undecoded::Invalid(e) => {
                return (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response();
            }
            Undecoded::Deep => {
                return (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal error: a deep review was not decoded off the worker threads\n",
                )
                    .into_response();
            }
        };
        let what = format!(
            "its body of {body} bytes holds {} values and {} object members, nested {} deep",
            footprint.values, footprint.members, footprint.depth
        );
        match refused {
            Refused::TooLarge { needed, limit } => (
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "the review is too large to decode: {what}, which would take {needed} bytes to decode, more than the {limit} bytes reviews like it may take together in flight (--webhook-max-in-flight-mib), large and deep ones seven eighths of it\n"
                ),
            )
                .into_response(),
            Refused::Busy { in_use, limit, .. } => overloaded(&format!(
                "reviews in flight hold {in_use} of the {limit} bytes they may take together (--webhook-max-in-flight-mib), and decoding this one would pass it ({what})"
            )),
        }
    }
}

/// A review decoded and charged to `budget` for what decoding it builds, refused before
/// decoding builds more than the budget has room for. `here`, on a worker thread (a body
/// under [`HEAVY_BODY_BYTES`]), a review for validation is counted by celgate's scanner as
/// it reads it, charged ahead of what it reads ([`Metered`]): one pass. Otherwise, and where
/// the scanner declines or the budget has no room for what it would read ahead, the body is
/// counted first ([`Footprint::of`]) and charged whole before anything is built, so that a
/// large review past the budget builds nothing. `Deep` when `here` and the body nests deeper
/// than [`HEAVY_DEPTH`].
fn charged_decode(
    body: &[u8],
    budget: Option<&Budget>,
    object: ObjectRead,
    here: bool,
) -> Result<(ReceivedRequest, Option<Charge>), Undecoded> {
    let mut scanner = true;
    if here && object.tape() {
        let mut meter = Metered {
            read: object,
            budget,
            body: body.len(),
            charge: None,
            stopped: false,
        };
        if let Some(decoded) = metered_decode(body, &mut meter) {
            let request = decoded.map_err(Undecoded::Invalid)?;
            return Ok((request, meter.charge));
        }
        // Text the scanner itself declines is read by serde_json's pass alone.
        scanner = meter.stopped;
    }
    let footprint = Footprint::of(body);
    if here && footprint.depth > HEAVY_DEPTH {
        return Err(Undecoded::Deep);
    }
    let cost = decode_cost(body.len(), &footprint, object);
    let charge = budget
        .map(|b| {
            if here {
                b.charge(cost)
            } else {
                b.charge_heavy(cost)
            }
        })
        .transpose()
        .map_err(|refused| Undecoded::Refused(refused, body.len(), footprint))?;
    let request = decode_with(body, object, scanner).map_err(Undecoded::Invalid)?;
    Ok((request, charge))
}

/// A review for validation read by celgate's scanner under `meter`, charged what decoding it
/// cost; `None` where the scanner declines or the budget stops it (see [`Metered`]), having
/// given back what it charged.
fn metered_decode(
    body: &[u8],
    meter: &mut Metered<'_>,
) -> Option<Result<ReceivedRequest, ReviewError>> {
    let text = std::str::from_utf8(body).ok()?;
    let shared: Arc<str> = Arc::from(text);
    let mut scan = Scan::metered(&shared, meter);
    let scanned = scanned(&mut scan);
    let read = scan.footprint();
    match scanned {
        Ok(wire) if meter.settle(&read) => Some(checked(wire)),
        _ => {
            meter.charge = None;
            None
        }
    }
}

/// Charges a review's decode to its budget while celgate's scanner reads it: before the
/// scanner reads on, what it has read and as many values and members again (at least one per
/// 8 bytes of the body, about what Kubernetes objects hold), each at its costliest, within
/// the budget. What decoding builds stays within what [`decode_cost`] charges for what was
/// read; the budget stops the scan where it has no room for that.
struct Metered<'b> {
    /// How the object is read (as a tape).
    read: ObjectRead,
    budget: Option<&'b Budget>,
    body: usize,
    charge: Option<Charge>,
    /// Whether the budget stopped the scan.
    stopped: bool,
}

impl Metered<'_> {
    /// Makes the charge what decoding `read` costs: whether the budget had room for it.
    fn settle(&mut self, read: &Footprint) -> bool {
        let cost = decode_cost(self.body, read, self.read);
        match (self.budget, &mut self.charge) {
            (Some(budget), Some(charge)) => budget.recharge(charge, cost).is_ok(),
            _ => true,
        }
    }
}

impl Meter for Metered<'_> {
    fn allow(&mut self, read: &Footprint) -> Option<usize> {
        let Some(budget) = self.budget else {
            return Some(usize::MAX);
        };
        /// One more of every count: the most one more value or member can cost.
        const ONE_MORE: Footprint = Footprint {
            values: 1,
            members: 1,
            strings: 1,
            arrays: 1,
            objects: 1,
            depth: 0,
        };
        let cost = decode_cost(self.body, read, self.read);
        let each = decode_cost(0, &ONE_MORE, self.read);
        let units = read.values + read.members;
        let ahead = units
            .max(self.body / 8)
            .min(budget.max_bytes().saturating_sub(cost) / each);
        let bytes = cost + ahead * each;
        let charged = match &mut self.charge {
            Some(charge) => budget.recharge(charge, bytes),
            None => budget
                .charge(bytes)
                .map(|charge| self.charge = Some(charge)),
        };
        if ahead == 0 || charged.is_err() {
            self.stopped = true;
            return None;
        }
        Some(units + ahead)
    }
}

impl<S: Send + Sync, const READ: u8> FromRequest<S> for Review<READ> {
    type Rejection = Response;

    async fn from_request(mut req: HttpRequest, state: &S) -> Result<Self, Self::Rejection> {
        let budget = req.extensions_mut().remove::<Budget>();
        // A heavy body's turn, taken before it was read (see `crate::server`).
        let turn = req.extensions_mut().remove::<Turn>();
        let body = Bytes::from_request(req, state)
            .await
            .map_err(IntoResponse::into_response)?;
        let object = ObjectRead::of(READ);
        // A small body is decoded here unless it nests deep; a large one on the pool.
        if body.len() < HEAVY_BODY_BYTES {
            match charged_decode(&body, budget.as_ref(), object, true) {
                Ok((request, charge)) => {
                    // Decided here: a turn taken for a body without a length ends now.
                    let held = Held {
                        _charge: charge,
                        heavy: false,
                        _turn: None,
                    };
                    return Ok(Review(request, held));
                }
                Err(Undecoded::Deep) => {}
                Err(undecoded) => return Err(undecoded.response()),
            }
        }
        let turn = match (turn, &budget) {
            (Some(turn), _) => Some(turn),
            (None, Some(budget)) => Some(budget.turn().await.map_err(NoTurn::response)?),
            (None, None) => None,
        };
        let decoded = tokio::task::spawn_blocking(move || {
            charged_decode(&body, budget.as_ref(), object, false)
        })
        .await
        .map_err(|e| {
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("internal error decoding the request: {e}\n"),
            )
                .into_response()
        })?;
        let (request, charge) = decoded.map_err(Undecoded::response)?;
        let held = Held {
            _charge: charge,
            heavy: true,
            _turn: turn,
        };
        Ok(Review(request, held))
    }
}

/// The audit annotation key a webhook may return for an upstream key. kube-apiserver records a
/// webhook's key `k` as `<webhook name>/k` and drops keys with a second `/`, so
/// `<policy>/<key>` becomes `<policy>_<key>` and the validation-failure key becomes
/// `validation_failure` (see the audit annotation table in docs/limitations.md).
pub fn webhook_annotation_key(upstream: &str) -> String {
    if upstream == VALIDATION_FAILURE_KEY {
        return "validation_failure".to_string();
    }
    upstream.replace('/', "_")
}

/// The response review for an outcome, serialized: members in the order of a
/// `serde_json::Value` (sorted), written straight from borrowed parts.
pub fn response(uid: &str, outcome: &Outcome) -> Vec<u8> {
    let annotations: BTreeMap<String, &str> = outcome
        .audit_annotations
        .iter()
        .map(|(k, v)| (webhook_annotation_key(k), v.as_str()))
        .collect();
    let review = ResponseReview {
        api_version: "admission.k8s.io/v1",
        kind: "AdmissionReview",
        response: ReviewResponse {
            allowed: outcome.allowed(),
            audit_annotations: (!annotations.is_empty()).then_some(annotations),
            status: outcome.denial.as_ref().map(|d| Status {
                code: d.code,
                message: &d.message,
                metadata: Empty {},
                reason: &d.reason,
                status: "Failure",
            }),
            uid,
            warnings: (!outcome.warnings.is_empty()).then_some(&outcome.warnings),
        },
    };
    // Serializing strings, numbers and maps of strings into memory cannot fail.
    serde_json::to_vec(&review).unwrap_or_default()
}

/// The response review for a mutation, serialized: allowed with the JSON patch from the
/// request's object to the mutated one (base64, `patchType: JSONPatch`) when it changed, or
/// the denial.
pub fn mutation_response(uid: &str, outcome: &MutationOutcome) -> Vec<u8> {
    if outcome.allowed() && !outcome.patch.is_empty() {
        return patched_response(uid, outcome.patch.as_bytes());
    }
    // Without a patch, the response a validation gives (its members in the same order).
    let review = ResponseReview {
        api_version: "admission.k8s.io/v1",
        kind: "AdmissionReview",
        response: ReviewResponse {
            allowed: outcome.allowed(),
            audit_annotations: None,
            status: outcome.denial.as_ref().map(|d| Status {
                code: d.code,
                message: &d.message,
                metadata: Empty {},
                reason: &d.reason,
                status: "Failure",
            }),
            uid,
            warnings: None,
        },
    };
    serde_json::to_vec(&review).unwrap_or_default()
}

/// The response review admitting a request with `patch` (JSON text), as serde writes it
/// (members sorted), the patch's base64 copied in as it is: its alphabet needs no escape, so
/// it is not scanned byte by byte as serde scans a string (or checks a raw value): 1.2% of a
/// realistic mutating review's instructions.
fn patched_response(uid: &str, patch: &[u8]) -> Vec<u8> {
    const HEAD: &[u8] =
        br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"allowed":true,"patch":""#;
    const MIDDLE: &[u8] = br#"","patchType":"JSONPatch","uid":"#;
    let base64 = &base64_simd::STANDARD;
    let mut out = Vec::with_capacity(
        HEAD.len() + base64.encoded_length(patch.len()) + MIDDLE.len() + uid.len() + 8,
    );
    out.extend_from_slice(HEAD);
    base64.encode_append(patch, &mut out);
    out.extend_from_slice(MIDDLE);
    // Writing a string into memory cannot fail.
    let _ = serde_json::to_writer(&mut out, uid);
    out.extend_from_slice(b"}}");
    out
}

/// An AdmissionReview carrying a response.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ResponseReview<'a> {
    api_version: &'static str,
    kind: &'static str,
    response: ReviewResponse<'a>,
}

/// An AdmissionResponse (fields sorted by their JSON names).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ReviewResponse<'a> {
    allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    audit_annotations: Option<BTreeMap<String, &'a str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<Status<'a>>,
    uid: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    warnings: Option<&'a Vec<String>>,
}

/// A metav1.Status of a denial (fields sorted by their JSON names).
#[derive(Serialize)]
struct Status<'a> {
    code: u16,
    message: &'a str,
    metadata: Empty,
    reason: &'a str,
    status: &'static str,
}

/// `{}`.
#[derive(Serialize)]
struct Empty {}

/// The response to a write of one of celgate's own kinds: allowed, or 422 Invalid with every
/// field error, as kube-apiserver answers for the in-tree kinds.
pub fn policy_validation_response(
    review: &ReceivedRequest,
    errors: &[FieldError],
) -> Result<Vec<u8>, DispatchError> {
    use celgate_engine::apivalidation::invalid_message;
    let req: Request<'_> = review.request()?;
    if errors.is_empty() {
        return Ok(allow(req.uid).to_string().into_bytes());
    }
    let name = req
        .object()
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or(req.name);
    let causes: Vec<Value> = errors
        .iter()
        .map(|e| {
            let message = e.to_string();
            let message = message
                .strip_prefix(&format!("{}: ", e.field))
                .unwrap_or(&message)
                .to_string();
            json!({"reason": e.kind.cause_reason(), "message": message, "field": e.field})
        })
        .collect();
    let response = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {
        "uid": req.uid, "allowed": false,
        "status": {"metadata": {}, "status": "Failure", "reason": "Invalid", "code": 422,
            "message": invalid_message(req.kind.name, req.kind.group, name, errors),
            "details": {"name": name, "group": req.kind.group,
                "kind": req.kind.name, "causes": causes}}}});
    Ok(response.to_string().into_bytes())
}

/// The response allowing a request with nothing to say.
pub fn allow(uid: &str) -> Value {
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "response": {"uid": uid, "allowed": true}})
}

#[cfg(test)]
mod tests {
    use super::*;
    use celgate_engine::validate::Denial;

    #[test]
    fn a_mutation_response_is_the_review_serde_writes_with_the_patch_in_base64() {
        use base64::Engine as _;
        let patch = vec![
            json!({"op": "add", "path": "/metadata/labels/a~1b", "value": "x\"y"}),
            json!({"op": "remove", "path": "/spec/containers/0/ports"}),
        ];
        let outcome = MutationOutcome {
            patch: celgate_engine::JsonPatchText::from_ops(&patch),
            ..Default::default()
        };
        let encoded = base64::engine::general_purpose::STANDARD
            .encode(serde_json::to_vec(&patch).expect("patch"));
        let want = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "response": {"allowed": true, "patch": encoded, "patchType": "JSONPatch", "uid": "u\"1"}});
        assert_eq!(
            String::from_utf8(mutation_response("u\"1", &outcome)).expect("UTF-8"),
            want.to_string()
        );
        // Unchanged, and denied: no patch.
        let want = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "response": {"allowed": true, "uid": "u"}});
        let unchanged = MutationOutcome::default();
        assert_eq!(
            mutation_response("u", &unchanged),
            want.to_string().into_bytes()
        );
        let denied = MutationOutcome {
            denial: Some(Denial {
                message: "no \"x\"".into(),
                reason: "Forbidden".into(),
                code: 403,
            }),
            ..outcome
        };
        let want = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "response": {"allowed": false, "uid": "u", "status": {"code": 403,
                "message": "no \"x\"", "metadata": {}, "reason": "Forbidden", "status": "Failure"}}});
        assert_eq!(
            mutation_response("u", &denied),
            want.to_string().into_bytes()
        );
    }

    #[test]
    fn a_review_nested_deeper_than_kube_apiserver_sends_is_refused() {
        // `options` nests `n` levels inside the review and its request: n + 2 in all.
        let body = |n: usize| {
            format!(
                r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"u","options":{}1{}}}}}"#,
                "[".repeat(n),
                "]".repeat(n)
            )
        };
        // On the stack celgate's threads have: such values are dropped recursively.
        let decoded = std::thread::Builder::new()
            .stack_size(celgate_snapshot::dispatch::THREAD_STACK_BYTES)
            .spawn(move || {
                let within =
                    decode(body(MAX_REVIEW_DEPTH - 2).as_bytes(), ObjectRead::Tape).map(|_| ());
                let beyond =
                    decode(body(MAX_REVIEW_DEPTH - 1).as_bytes(), ObjectRead::Tape).map(|_| ());
                (
                    within.map_err(|e| e.to_string()),
                    beyond.map_err(|e| e.to_string()),
                )
            })
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(decoded.0, Ok(()));
        assert_eq!(
            decoded.1,
            Err("request body is nested deeper than 10002 levels".to_string())
        );
    }

    fn review_of(object: &str) -> String {
        format!(
            r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"u","operation":"CREATE","kind":{{"group":"","version":"v1","kind":"ConfigMap"}},"resource":{{"group":"","version":"v1","resource":"configmaps"}},"object":{object}}}}}"#
        )
    }

    #[test]
    fn the_object_is_read_as_a_tape_in_the_same_pass_as_the_review() {
        use celgate_cel::value::Map;
        let object = r#"{"data": {"b": "x\ny", "a": "1", "a": "last"}, "n": [18446744073709551615, -0, 1.5]}"#;
        let r = decode(review_of(object).as_bytes(), ObjectRead::Tape).expect("a review");
        assert!(r.object_read_with_request(), "read in the review's pass");
        let req = r.request().expect("valid");
        let cel = req.cel_object();
        assert!(
            matches!(cel, celgate_cel::Value::Map(Map::Tape(_))),
            "read in place: {cel:?}"
        );
        let decoded: Value = serde_json::from_str(object).expect("JSON");
        assert_eq!(cel, celgate_cel::Value::from_json(&decoded));
        // What mutation and object selectors read: the value decoding gives, numbers and all.
        assert_eq!(req.object().to_string(), decoded.to_string());
        assert!(r.decode_error().is_none());
        // For mutation the object stays text until read (it is read as a serde_json::Value).
        let r = decode(review_of(object).as_bytes(), ObjectRead::Text).expect("a review");
        assert!(!r.object_read_with_request());
        assert_eq!(
            r.request().expect("valid").object().to_string(),
            decoded.to_string()
        );
        // A null object is null.
        let r = decode(review_of("null").as_bytes(), ObjectRead::Tape).expect("a review");
        assert!(r.request().expect("valid").object().is_null());
    }

    /// The request as serde_json's pass reads it: its members, object and old object.
    fn through_serde(body: &str) -> Option<(Value, Value, Value)> {
        let shared: Arc<str> = Arc::from(body);
        let mut de = serde_json::Deserializer::from_str(&shared);
        let wire = de
            .deserialize_any(WireVisitor {
                shared: Some(&shared),
            })
            .ok()?;
        de.end().ok()?;
        parts(wire.request?)
    }

    fn parts(r: ReceivedRequest) -> Option<(Value, Value, Value)> {
        let req = r.request().ok()?;
        Some((
            r.fields().clone(),
            req.object().clone(),
            req.old_object().clone(),
        ))
    }

    #[test]
    fn the_scanner_reads_a_review_as_serde_json_does() {
        let update = r#"{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{
            "uid":"u","operation":"UPDATE","kind":{"group":"","version":"v1","kind":"ConfigMap"},
            "resource":{"group":"","version":"v1","resource":"configmaps"},"name":"c\u00e9",
            "userInfo":{"username":"alice","groups":["g1","g2"],"extra":{"k":["v"]}},
            "options":{"fieldManager":"m"},"dryRun":false,"uid":"last uid wins",
            "object":{"data":{"b":"x\ny","a":"1"},"n":[18446744073709551615,-0,1.5]},
            "oldObject":{"data":{"a":"0"}}},"extra":[1,{"x":null}]}"#;
        let cases = [
            update.to_string(),
            review_of(r#"{"metadata": {"name": "a", "labels": {"z": "1", "a": "2"}}}"#),
            review_of("null"),
        ];
        for body in &cases {
            let shared: Arc<str> = Arc::from(body.as_str());
            let wire =
                scanned(&mut Scan::new(&shared)).unwrap_or_else(|_| panic!("scanned: {body}"));
            let request = checked(wire).expect("a review");
            assert!(request.object_read_with_request(), "{body}");
            assert_eq!(parts(request), through_serde(body), "{body}");
        }
        // Not a review in one way or another: the same error as serde_json's pass gives.
        for body in [
            r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":5}"#,
            r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#,
            r#"{"apiVersion":"v1","kind":"AdmissionReview","request":{}}"#,
        ] {
            let shared: Arc<str> = Arc::from(body);
            let wire = scanned(&mut Scan::new(&shared)).expect("scanned");
            let err = checked(wire).map(|_| ()).expect_err("not a review");
            let via_serde = serde_json::from_str::<Wire>(body).expect("JSON");
            let want = checked(via_serde).map(|_| ()).expect_err("not a review");
            assert_eq!(err.to_string(), want.to_string(), "{body}");
        }
        // Text the scanner leaves to serde_json: a review that is not an object, a surrogate
        // pair. The review is still read, as before.
        let scan = |text: &str| scanned(&mut Scan::new(&Arc::from(text))).map(|_| ());
        assert_eq!(scan("[1]"), Err(Declined));
        let pair = review_of(r#"{"emoji": "\ud83d\ude00"}"#);
        assert_eq!(scan(&pair), Err(Declined));
        let r = decode(pair.as_bytes(), ObjectRead::Tape).expect("a review");
        assert_eq!(
            r.request().expect("valid").object(),
            &json!({"emoji": "\u{1F600}"})
        );
    }

    #[test]
    fn an_object_the_one_pass_cannot_read_is_kept_as_text_until_read() {
        // A number no double holds: the review is answered, and only reading the object fails.
        let r =
            decode(review_of(r#"{"n": 1e400}"#).as_bytes(), ObjectRead::Tape).expect("a review");
        assert!(!r.object_read_with_request());
        assert!(r.decode_error().is_none(), "not read yet");
        let req = r.request().expect("valid");
        assert_eq!(req.cel_object(), celgate_cel::Value::Null);
        assert_eq!(
            r.decode_error().map(|e| e.to_string()).as_deref(),
            Some("request.object cannot be decoded: number out of range at line 1 column 11")
        );
        // Deeper than serde_json's 128 levels: read on a growing stack when first read.
        let depth = 300;
        let deep = format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
        let r = std::thread::Builder::new()
            .stack_size(celgate_snapshot::dispatch::THREAD_STACK_BYTES)
            .spawn(move || {
                let r = decode(
                    review_of(&format!(r#"{{"deep": {deep}}}"#)).as_bytes(),
                    ObjectRead::Tape,
                )
                .expect("a review");
                let req = r.request().expect("valid");
                let mut at = req.object().get("deep").cloned().unwrap_or_default();
                for _ in 0..depth {
                    at = at.get(0).cloned().unwrap_or_default();
                }
                (at, r.decode_error().map(|e| e.to_string()))
            })
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(r, (json!(1), None));
        // Not JSON at all: the error of reading the review as before.
        let err = decode(review_of("{").as_bytes(), ObjectRead::Tape).expect_err("not JSON");
        assert!(
            err.to_string()
                .starts_with("request body is not valid JSON: "),
            "{err}"
        );
    }

    /// The thread a review of `object` is decided on, through the extractor, and its status.
    async fn decided_on(object: &str) -> (StatusCode, String) {
        let limits = crate::Limits::DEFAULT;
        let mut req = HttpRequest::new(axum::body::Body::from(review_of(object)));
        req.extensions_mut().insert(Budget::new(&limits));
        let review = match ValidationReview::from_request(req, &()).await {
            Ok(review) => review,
            Err(refused) => {
                let status = refused.status();
                let body = axum::body::to_bytes(refused.into_body(), usize::MAX)
                    .await
                    .expect("a body");
                return (status, String::from_utf8_lossy(&body).into_owned());
            }
        };
        let Review(_, held) = review;
        let thread = async { format!("{:?}", std::thread::current().id()).into_response() };
        let response = held.decide(thread).await;
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("a body");
        (StatusCode::OK, String::from_utf8_lossy(&body).into_owned())
    }

    /// A review for validation through the extractor under a budget of `max` bytes: its
    /// status, and the bytes it held of the budget once decoded.
    async fn charged_under(body: &str, max: usize) -> (StatusCode, usize) {
        let budget = Budget::new(&crate::Limits {
            max_in_flight_bytes: max,
            ..crate::Limits::DEFAULT
        });
        let mut req = HttpRequest::new(axum::body::Body::from(body.to_string()));
        req.extensions_mut().insert(budget.clone());
        match ValidationReview::from_request(req, &()).await {
            Ok(review) => {
                let held = budget.in_use();
                drop(review);
                (StatusCode::OK, held)
            }
            Err(refused) => (refused.status(), budget.in_use()),
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_review_scanned_once_is_charged_what_counting_it_first_would_charge() {
        let object = format!(
            r#"{{"metadata": {{"name": "a", "labels": {{"x": "y"}}}}, "data": {{"list": [{}0], "e": "\n"}}}}"#,
            "0,".repeat(2_000)
        );
        let body = review_of(&object);
        let footprint = Footprint::of(body.as_bytes());
        let cost = decode_cost(body.len(), &footprint, ObjectRead::Tape);
        let held = cost.div_ceil(1024) * 1024;
        // Scanned under a large budget: held what the read ahead of each step would have
        // charged, settled to the cost of what was read.
        assert_eq!(charged_under(&body, 64 << 20).await, (StatusCode::OK, held));
        // A budget of just that: the scan cannot read ahead, and the review is charged as
        // counted first; one KiB less, and it is too large.
        assert_eq!(charged_under(&body, held).await, (StatusCode::OK, held));
        assert_eq!(
            charged_under(&body, held - 1024).await,
            (StatusCode::PAYLOAD_TOO_LARGE, 0)
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn large_and_deep_reviews_are_decided_off_the_runtimes_threads() {
        let here = format!("{:?}", std::thread::current().id());
        let small = decided_on(r#"{"metadata": {"name": "a"}}"#).await;
        assert_eq!(small, (StatusCode::OK, here.clone()), "decided here");
        let large = format!(r#"{{"data": {{"a": "{}"}}}}"#, "x".repeat(HEAVY_BODY_BYTES));
        let (status, thread) = decided_on(&large).await;
        assert_eq!(status, StatusCode::OK);
        assert_ne!(thread, here, "decided on the blocking pool");
        let deep = format!("{}{}", "[".repeat(HEAVY_DEPTH), "]".repeat(HEAVY_DEPTH));
        let (status, thread) = decided_on(&deep).await;
        assert_eq!(status, StatusCode::OK);
        assert_ne!(thread, here, "decided on the blocking pool");
        // Past the budget: refused before anything is built.
        let bomb = format!("[{}0]", "0,".repeat(700_000));
        let (status, text) = decided_on(&bomb).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
        assert!(
            text.starts_with("the review is too large to decode"),
            "{text}"
        );
    }

    #[test]
    fn a_response_is_the_review_kube_apiserver_reads() {
        let outcome = Outcome {
            denial: Some(Denial {
                message: "ValidatingAdmissionPolicy 'p' denied request: <no>".into(),
                reason: "Forbidden".into(),
                code: 403,
            }),
            warnings: vec!["w1".into(), "w2".into()],
            audit_annotations: vec![
                ("p/key".into(), "v".into()),
                (VALIDATION_FAILURE_KEY.into(), "[]".into()),
            ],
            checks: Vec::new(),
            excepted: Vec::new(),
        };
        let want = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "response": {"uid": "u1", "allowed": false,
                "status": {"metadata": {}, "status": "Failure", "reason": "Forbidden", "code": 403,
                    "message": "ValidatingAdmissionPolicy 'p' denied request: <no>"},
                "warnings": ["w1", "w2"],
                "auditAnnotations": {"p_key": "v", "validation_failure": "[]"}}});
        // Byte for byte what serializing the same `Value` writes.
        assert_eq!(
            String::from_utf8(response("u1", &outcome)).unwrap(),
            want.to_string()
        );
        let allowed = response("u2", &Outcome::default());
        assert_eq!(String::from_utf8(allowed).unwrap(), allow("u2").to_string());
    }
}
