//! Encoding a job's arguments into a payload every worker can decode and PostgreSQL can store.
//!
//! Workers decode payloads with `serde_json`, which refuses JSON nested deeper than its recursion
//! limit, and PostgreSQL's `jsonb` cannot hold the character U+0000. A payload that breaks either
//! rule would be written and then fail on every attempt, or abort the caller's transaction, so
//! both are refused before the payload reaches a connection.
//!
//! Serializing arguments is recursive (each nested value calls into the next), so arguments
//! nested thousands of levels deep would overflow the enqueuing thread's stack before any check
//! ran. [`encode_payload`] therefore stops serializing at the first container past the limit, and
//! [`check_payload`] walks a payload without recursion.

use std::cell::Cell;
use std::fmt::Write as _;

use serde::ser::{self, Error as _, Serialize, Serializer};
use serde_json::Value;

/// The deepest nesting of arrays and objects a payload may have, counting the payload object
/// itself as 1: the most `serde_json` decodes (it refuses the 128th level).
pub const MAX_PAYLOAD_DEPTH: usize = 127;

/// Why a payload was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PayloadProblem {
    /// It nests arrays and objects deeper than [`MAX_PAYLOAD_DEPTH`].
    TooDeep,
    /// A string or object key holds U+0000; the place it was found, as `payload.field[index]`.
    NulCharacter(String),
}

/// Serializes `args` to JSON, refusing values nested deeper than [`MAX_PAYLOAD_DEPTH`] without
/// ever recursing deeper than that. Other serializer errors come back as they are.
pub fn encode_payload<T: Serialize + ?Sized>(
    args: &T,
) -> Result<Value, Result<PayloadProblem, serde_json::Error>> {
    let exceeded = Cell::new(false);
    let limited = Limited {
        inner: serde_json::value::Serializer,
        depth: 0,
        exceeded: &exceeded,
    };
    args.serialize(limited).map_err(|error| {
        if exceeded.get() {
            Ok(PayloadProblem::TooDeep)
        } else {
            Err(error)
        }
    })
}

/// Checks, without recursion, that `payload` nests no deeper than [`MAX_PAYLOAD_DEPTH`] and holds
/// no U+0000 in any string or object key.
pub fn check_payload(payload: &Value) -> Result<(), PayloadProblem> {
    let mut pending: Vec<(&Value, usize)> = vec![(payload, 0)];
    while let Some((value, depth)) = pending.pop() {
        match value {
            Value::String(text) if text.contains('\0') => {
                return Err(PayloadProblem::NulCharacter(find_nul(payload)));
            }
            Value::Array(items) => {
                let inner = nested(depth)?;
                pending.extend(items.iter().map(|item| (item, inner)));
            }
            Value::Object(fields) => {
                let inner = nested(depth)?;
                for (key, item) in fields {
                    if key.contains('\0') {
                        return Err(PayloadProblem::NulCharacter(find_nul(payload)));
                    }
                    pending.push((item, inner));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// The depth of a container's contents, or the refusal when it is one level too many.
fn nested(depth: usize) -> Result<usize, PayloadProblem> {
    if depth >= MAX_PAYLOAD_DEPTH {
        Err(PayloadProblem::TooDeep)
    } else {
        Ok(depth + 1)
    }
}

/// Where the first U+0000 of `payload` is, as `payload.field[index]` (a key holding it is named
/// as `payload.field (key)`). Only called once a NUL is known to be there, on a payload whose
/// depth is already checked.
fn find_nul(payload: &Value) -> String {
    let mut pending: Vec<(&Value, String)> = vec![(payload, "payload".to_string())];
    while let Some((value, path)) = pending.pop() {
        match value {
            Value::String(text) if text.contains('\0') => return path,
            Value::Array(items) => {
                for (index, item) in items.iter().enumerate().rev() {
                    pending.push((item, format!("{path}[{index}]")));
                }
            }
            Value::Object(fields) => {
                for (key, item) in fields {
                    let mut inner = path.clone();
                    let _ = write!(inner, ".{}", key.escape_debug());
                    if key.contains('\0') {
                        return format!("{inner} (key)");
                    }
                    pending.push((item, inner));
                }
            }
            _ => {}
        }
    }
    "payload".to_string()
}

/// A serializer that passes everything to `inner`, refusing to open a container past
/// [`MAX_PAYLOAD_DEPTH`]; `depth` containers are open around the value being serialized.
struct Limited<'a, S> {
    inner: S,
    depth: usize,
    exceeded: &'a Cell<bool>,
}

/// A value to serialize with a [`Limited`] serializer at `depth`.
struct Guarded<'a, 'v, T: ?Sized> {
    value: &'v T,
    depth: usize,
    exceeded: &'a Cell<bool>,
}

impl<T: Serialize + ?Sized> Serialize for Guarded<'_, '_, T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.value.serialize(Limited {
            inner: serializer,
            depth: self.depth,
            exceeded: self.exceeded,
        })
    }
}

/// A container being serialized by a [`Limited`] serializer, its contents at `depth`.
struct Compound<'a, C> {
    inner: C,
    depth: usize,
    exceeded: &'a Cell<bool>,
}

impl<'a, C> Compound<'a, C> {
    fn guard<'v, T: ?Sized>(&self, value: &'v T) -> Guarded<'a, 'v, T> {
        Guarded {
            value,
            depth: self.depth,
            exceeded: self.exceeded,
        }
    }
}

impl<'a, S: Serializer> Limited<'a, S> {
    /// The depth inside `levels` more containers (an enum variant with contents is written by
    /// `serde_json` as an object around them), or an error past the limit.
    fn open(&self, levels: usize) -> Result<usize, S::Error> {
        let depth = self.depth + levels;
        if depth > MAX_PAYLOAD_DEPTH {
            self.exceeded.set(true);
            Err(S::Error::custom(format_args!(
                "arguments nest deeper than {MAX_PAYLOAD_DEPTH} arrays or objects"
            )))
        } else {
            Ok(depth)
        }
    }

    fn guard<'v, T: ?Sized>(&self, value: &'v T, depth: usize) -> Guarded<'a, 'v, T> {
        Guarded {
            value,
            depth,
            exceeded: self.exceeded,
        }
    }

    fn compound<C>(&self, inner: C, depth: usize) -> Compound<'a, C> {
        Compound {
            inner,
            depth,
            exceeded: self.exceeded,
        }
    }
}

macro_rules! pass_through {
    ($($method:ident($($arg:ident: $ty:ty),*);)*) => {
        $(
            fn $method(self, $($arg: $ty),*) -> Result<S::Ok, S::Error> {
                self.inner.$method($($arg),*)
            }
        )*
    };
}

impl<'a, S: Serializer> Serializer for Limited<'a, S> {
    type Ok = S::Ok;
    type Error = S::Error;
    type SerializeSeq = Compound<'a, S::SerializeSeq>;
    type SerializeTuple = Compound<'a, S::SerializeTuple>;
    type SerializeTupleStruct = Compound<'a, S::SerializeTupleStruct>;
    type SerializeTupleVariant = Compound<'a, S::SerializeTupleVariant>;
    type SerializeMap = Compound<'a, S::SerializeMap>;
    type SerializeStruct = Compound<'a, S::SerializeStruct>;
    type SerializeStructVariant = Compound<'a, S::SerializeStructVariant>;

    pass_through! {
        serialize_bool(v: bool);
        serialize_i8(v: i8);
        serialize_i16(v: i16);
        serialize_i32(v: i32);
        serialize_i64(v: i64);
        serialize_i128(v: i128);
        serialize_u8(v: u8);
        serialize_u16(v: u16);
        serialize_u32(v: u32);
        serialize_u64(v: u64);
        serialize_u128(v: u128);
        serialize_f32(v: f32);
        serialize_f64(v: f64);
        serialize_char(v: char);
        serialize_str(v: &str);
        serialize_bytes(v: &[u8]);
        serialize_none();
        serialize_unit();
        serialize_unit_struct(name: &'static str);
        serialize_unit_variant(name: &'static str, index: u32, variant: &'static str);
    }

    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<S::Ok, S::Error> {
        let guarded = self.guard(value, self.depth);
        self.inner.serialize_some(&guarded)
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        value: &T,
    ) -> Result<S::Ok, S::Error> {
        let guarded = self.guard(value, self.depth);
        self.inner.serialize_newtype_struct(name, &guarded)
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<S::Ok, S::Error> {
        let depth = self.open(1)?;
        let guarded = self.guard(value, depth);
        self.inner
            .serialize_newtype_variant(name, index, variant, &guarded)
    }

    fn serialize_seq(self, len: Option<usize>) -> Result<Self::SerializeSeq, S::Error> {
        let depth = self.open(1)?;
        let compound = self.compound((), depth);
        Ok(compound_with(compound, self.inner.serialize_seq(len)?))
    }

    fn serialize_tuple(self, len: usize) -> Result<Self::SerializeTuple, S::Error> {
        let depth = self.open(1)?;
        let compound = self.compound((), depth);
        Ok(compound_with(compound, self.inner.serialize_tuple(len)?))
    }

    fn serialize_tuple_struct(
        self,
        name: &'static str,
        len: usize,
    ) -> Result<Self::SerializeTupleStruct, S::Error> {
        let depth = self.open(1)?;
        let compound = self.compound((), depth);
        Ok(compound_with(
            compound,
            self.inner.serialize_tuple_struct(name, len)?,
        ))
    }

    fn serialize_tuple_variant(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Self::SerializeTupleVariant, S::Error> {
        let depth = self.open(2)?;
        let compound = self.compound((), depth);
        Ok(compound_with(
            compound,
            self.inner
                .serialize_tuple_variant(name, index, variant, len)?,
        ))
    }

    fn serialize_map(self, len: Option<usize>) -> Result<Self::SerializeMap, S::Error> {
        let depth = self.open(1)?;
        let compound = self.compound((), depth);
        Ok(compound_with(compound, self.inner.serialize_map(len)?))
    }

    fn serialize_struct(
        self,
        name: &'static str,
        len: usize,
    ) -> Result<Self::SerializeStruct, S::Error> {
        let depth = self.open(1)?;
        let compound = self.compound((), depth);
        Ok(compound_with(
            compound,
            self.inner.serialize_struct(name, len)?,
        ))
    }

    fn serialize_struct_variant(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Self::SerializeStructVariant, S::Error> {
        let depth = self.open(2)?;
        let compound = self.compound((), depth);
        Ok(compound_with(
            compound,
            self.inner
                .serialize_struct_variant(name, index, variant, len)?,
        ))
    }

    fn is_human_readable(&self) -> bool {
        self.inner.is_human_readable()
    }
}

/// `compound` with the inner serializer's container in place.
fn compound_with<C>(compound: Compound<'_, ()>, inner: C) -> Compound<'_, C> {
    Compound {
        inner,
        depth: compound.depth,
        exceeded: compound.exceeded,
    }
}

/// Implements one of serde's compound traits for `Compound`: each element or field is guarded
/// (its depth counted) before the inner serializer writes it, and `end` ends the inner one.
/// `keyed` traits (structs) take a field name with each value and may skip fields.
macro_rules! guarded_compound {
    ($compound:ident, $write:ident) => {
        impl<C: ser::$compound> ser::$compound for Compound<'_, C> {
            type Ok = C::Ok;
            type Error = C::Error;

            fn $write<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), C::Error> {
                let guarded = self.guard(value);
                self.inner.$write(&guarded)
            }

            fn end(self) -> Result<C::Ok, C::Error> {
                self.inner.end()
            }
        }
    };
    ($compound:ident, $write:ident, keyed) => {
        impl<C: ser::$compound> ser::$compound for Compound<'_, C> {
            type Ok = C::Ok;
            type Error = C::Error;

            fn $write<T: Serialize + ?Sized>(
                &mut self,
                key: &'static str,
                value: &T,
            ) -> Result<(), C::Error> {
                let guarded = self.guard(value);
                self.inner.$write(key, &guarded)
            }

            fn skip_field(&mut self, key: &'static str) -> Result<(), C::Error> {
                self.inner.skip_field(key)
            }

            fn end(self) -> Result<C::Ok, C::Error> {
                self.inner.end()
            }
        }
    };
}

guarded_compound!(SerializeSeq, serialize_element);
guarded_compound!(SerializeTuple, serialize_element);
guarded_compound!(SerializeTupleStruct, serialize_field);
guarded_compound!(SerializeTupleVariant, serialize_field);
guarded_compound!(SerializeStruct, serialize_field, keyed);
guarded_compound!(SerializeStructVariant, serialize_field, keyed);

impl<C: ser::SerializeMap> ser::SerializeMap for Compound<'_, C> {
    type Ok = C::Ok;
    type Error = C::Error;

    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), C::Error> {
        let guarded = self.guard(key);
        self.inner.serialize_key(&guarded)
    }

    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), C::Error> {
        let guarded = self.guard(value);
        self.inner.serialize_value(&guarded)
    }

    fn end(self) -> Result<C::Ok, C::Error> {
        self.inner.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// `depth` arrays around a number, built without recursion.
    fn nested(depth: usize) -> Value {
        let mut value = json!(0);
        for _ in 0..depth {
            value = Value::Array(vec![value]);
        }
        value
    }

    /// Drops a deeply nested value without recursion.
    fn dismantle(value: Value) {
        let mut pending = vec![value];
        while let Some(mut value) = pending.pop() {
            match &mut value {
                Value::Array(items) => pending.append(items),
                Value::Object(fields) => {
                    pending.extend(std::mem::take(fields).into_iter().map(|(_, item)| item));
                }
                _ => {}
            }
        }
    }

    #[test]
    fn the_deepest_accepted_payload_decodes_and_one_level_more_does_not() {
        let deepest = json!({ "value": nested(MAX_PAYLOAD_DEPTH - 1) });
        assert_eq!(check_payload(&deepest), Ok(()));
        assert_eq!(encode_payload(&deepest).ok(), Some(deepest.clone()));
        serde_json::from_str::<Value>(&deepest.to_string()).expect("decodes");

        let deeper = json!({ "value": nested(MAX_PAYLOAD_DEPTH) });
        assert_eq!(check_payload(&deeper), Err(PayloadProblem::TooDeep));
        assert!(matches!(
            encode_payload(&deeper),
            Err(Ok(PayloadProblem::TooDeep))
        ));
        assert!(serde_json::from_str::<Value>(&deeper.to_string()).is_err());
    }

    #[test]
    fn enum_variants_count_as_the_objects_they_are_written_as() {
        #[derive(serde::Serialize)]
        enum Shape {
            Tagged(Value),
        }
        let fits = json!({ "v": Shape::Tagged(nested(MAX_PAYLOAD_DEPTH - 2)) });
        assert_eq!(check_payload(&fits), Ok(()));
        let args =
            std::collections::BTreeMap::from([("v", Shape::Tagged(nested(MAX_PAYLOAD_DEPTH - 1)))]);
        assert!(matches!(
            encode_payload(&args),
            Err(Ok(PayloadProblem::TooDeep))
        ));
    }

    #[test]
    fn ten_thousand_levels_are_refused_on_a_small_stack() {
        std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(|| {
                let args = std::collections::BTreeMap::from([("value", nested(10_000))]);
                assert!(matches!(
                    encode_payload(&args),
                    Err(Ok(PayloadProblem::TooDeep))
                ));
                let payload = Value::Object(args.into_iter().map(|(k, v)| (k.into(), v)).collect());
                assert_eq!(check_payload(&payload), Err(PayloadProblem::TooDeep));
                dismantle(payload);
            })
            .unwrap()
            .join()
            .unwrap();
    }

    #[test]
    fn names_where_a_nul_character_is() {
        assert_eq!(
            check_payload(&json!({"a": [1, {"b": "x\u{0}"}]})),
            Err(PayloadProblem::NulCharacter("payload.a[1].b".into()))
        );
        assert_eq!(
            check_payload(&json!({"a": {"k\u{0}": 1}})),
            Err(PayloadProblem::NulCharacter("payload.a.k\\0 (key)".into()))
        );
        assert_eq!(check_payload(&json!({"a": "fine"})), Ok(()));
    }
}
