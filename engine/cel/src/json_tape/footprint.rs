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
    /// Counts `text` in one pass: strings are skipped eight bytes at a time, and only the
    /// bytes between them are looked at one by one.
    pub fn of(text: &[u8]) -> Self {
        let mut f = Footprint::default();
        // Tokens that start a value or a key (a key is then taken back at its `:`).
        let mut starts = 0usize;
        let mut depth = 0usize;
        // The last byte read outside strings and white space; the text starts as if after
        // a `,`, so its first token starts a value.
        let mut last = b',';
        let mut i = 0;
        while let Some(&b) = text.get(i) {
            i += 1;
            if matches!(b, b' ' | b'\n' | b'\r' | b'\t') {
                continue;
            }
            // A token right after an opening bracket: its array or object is not empty.
            let (token, first) = match b {
                b']' | b'}' | b':' | b',' => (false, false),
                _ => (true, matches!(last, b'[' | b'{')),
            };
            f.arrays += usize::from(first && last == b'[');
            f.objects += usize::from(first && last == b'{');
            match b {
                b'"' => {
                    f.strings += 1;
                    i = string_end(text, i);
                }
                b'[' | b'{' => {
                    depth += 1;
                    f.depth = f.depth.max(depth);
                }
                b']' | b'}' => depth = depth.saturating_sub(1),
                b':' => f.members += 1,
                _ => {}
            }
            // A number or literal: only its first byte starts it.
            let scalar_rest =
                !matches!(b, b'"' | b'[' | b'{') && !matches!(last, b'[' | b'{' | b',' | b':');
            starts += usize::from(token && !scalar_rest);
            last = b;
        }
        f.values = starts.saturating_sub(f.members);
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
