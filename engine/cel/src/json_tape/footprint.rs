//! What decoding JSON text would build, counted in one pass that builds nothing: the values,
//! object members and strings a tape or a `serde_json::Value` of the text holds, and how deep
//! it nests. A server weighs a body by this before decoding it, since what decoding builds
//! is not proportional to the text's length: two bytes of `[0,0,…]` are one value of a tape
//! (20 bytes) or of a `serde_json::Value` (32 bytes, more with its array's growth).

use super::scan::plain_end;

/// The counts of a JSON text (see the module documentation). For text that is not JSON the
/// counts are those of what a decoder reads before it stops, or more.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Footprint {
    /// Values of every kind: numbers, `true`, `false`, `null`, strings, arrays and objects
    /// (an object's keys are members, not values).
    pub values: usize,
    /// Members of objects, each a key and its value.
    pub members: usize,
    /// Strings, keys included.
    pub strings: usize,
    /// Arrays with at least one element.
    pub arrays: usize,
    /// Objects with at least one member.
    pub objects: usize,
    /// The deepest nesting of arrays and objects.
    pub depth: usize,
}

impl Footprint {
    /// Counts `text` in one pass that looks only at the bytes that shape it: strings are
    /// skipped eight bytes at a time, numbers, literals and white space a byte at a time.
    /// Every value but the text's own follows a `,` or opens an array or object, so the values
    /// are counted from the commas and the arrays and objects that are not empty; the members
    /// from the colons.
    pub fn of(text: &[u8]) -> Self {
        let mut f = Footprint::default();
        let (mut commas, mut depth, mut i) = (0usize, 0usize, 0usize);
        while let Some(&b) = text.get(i) {
            i += 1;
            match b {
                b'"' => {
                    f.strings += 1;
                    i = string_end(text, i);
                }
                b'[' | b'{' => {
                    depth += 1;
                    f.depth = f.depth.max(depth);
                    // Not empty when anything but white space and its closing bracket follows.
                    let mut next = i;
                    while matches!(text.get(next), Some(b' ' | b'\n' | b'\r' | b'\t')) {
                        next += 1;
                    }
                    let empty = matches!(text.get(next), Some(b']' | b'}') | None);
                    f.arrays += usize::from(!empty && b == b'[');
                    f.objects += usize::from(!empty && b == b'{');
                }
                b']' | b'}' => depth = depth.saturating_sub(1),
                b',' => commas += 1,
                b':' => f.members += 1,
                _ => {}
            }
        }
        // A non-empty array or object holds one element more than the commas between them.
        let text_value = usize::from(text.iter().any(|b| !b.is_ascii_whitespace()));
        f.values = text_value + commas + f.arrays + f.objects;
        f
    }
}

/// The index after the closing quote of the string whose opening quote ends before `i` (or
/// the text's length, when it is not closed).
fn string_end(text: &[u8], mut i: usize) -> usize {
    loop {
        i = plain_end(text, i);
        match text.get(i) {
            Some(b'"') => return i + 1,
            // An escape: its next byte cannot close the string.
            Some(b'\\') => i += 2,
            // A control character: not JSON; read on as the decoder would not.
            Some(_) => i += 1,
            None => return text.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    /// The counts of a decoded value, walked: what a decoder builds.
    fn walked(v: &serde_json::Value, depth: usize, f: &mut Footprint) {
        use serde_json::Value as Json;
        f.values += 1;
        match v {
            Json::String(_) => f.strings += 1,
            Json::Array(items) => {
                f.depth = f.depth.max(depth + 1);
                f.arrays += usize::from(!items.is_empty());
                for item in items {
                    walked(item, depth + 1, f);
                }
            }
            Json::Object(map) => {
                f.depth = f.depth.max(depth + 1);
                f.objects += usize::from(!map.is_empty());
                for item in map.values() {
                    f.members += 1;
                    f.strings += 1;
                    walked(item, depth + 1, f);
                }
            }
            _ => {}
        }
    }

    #[test]
    fn the_counts_are_those_of_the_decoded_value() {
        let docs = [
            r#"{"b": 1, "a": [true, false, null, -3, 1.5e3, "x\"y", "é", ""], "c": {"z": {}, "y": []}}"#,
            r#" [ "\\", "\"", "]", "[{:,", 0 , -0.5E+2 ] "#,
            "[[[[]]], [{}], {\"k\": [[], {}]}]",
            "\"alone\"",
            "12345",
            "null",
            "[]",
        ];
        for doc in docs {
            let decoded: serde_json::Value = serde_json::from_str(doc).unwrap();
            let mut want = Footprint::default();
            walked(&decoded, 0, &mut want);
            assert_eq!(Footprint::of(doc.as_bytes()), want, "{doc}");
        }
    }

    #[test]
    fn the_bombs_are_counted_by_what_they_build() {
        let n = 10_000;
        let numbers = format!("[{}0]", "0,".repeat(n - 1));
        assert_eq!(Footprint::of(numbers.as_bytes()).values, n + 1);
        let empties = format!("[{}{{}}]", "{},".repeat(n - 1));
        assert_eq!(Footprint::of(empties.as_bytes()).values, n + 1);
        let deep = format!("{}{}", "[".repeat(n), "]".repeat(n));
        let f = Footprint::of(deep.as_bytes());
        assert_eq!((f.values, f.depth, f.arrays), (n, n, n - 1));
        let keys: String = (0..n).map(|i| format!("\"k{i}\":0,")).collect();
        let keys = format!("{{{}\"last\":0}}", keys);
        let f = Footprint::of(keys.as_bytes());
        assert_eq!(
            (f.values, f.members, f.strings, f.objects),
            (n + 2, n + 1, n + 1, 1)
        );
    }
}
