//! The `wire_enum!` macro: closed sets of wire strings as Rust enums.
//!
//! Every enum that travels on the wire is declared through this macro so that
//! the mapping between a variant and its exact wire spelling exists once, and
//! decoding an unknown spelling is an error rather than a silent default.

/// A closed set of wire strings, decodable by the payload field reader.
pub(crate) trait WireEnum: Sized + Copy + 'static {
    /// Every variant, in declaration order.
    const ALL: &'static [Self];
    /// The exact wire spelling.
    fn as_wire(self) -> &'static str;
    /// The variant for an exact wire spelling.
    fn from_wire(text: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|v| v.as_wire() == text)
    }
    /// The accepted spellings, for error messages.
    fn expected() -> String {
        Self::ALL
            .iter()
            .map(|v| format!("\"{}\"", v.as_wire()))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $wire:literal ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $( $(#[$vmeta])* $variant ),+
        }

        impl $name {
            /// The exact wire spelling of this value.
            pub fn as_str(self) -> &'static str {
                match self { $( $name::$variant => $wire ),+ }
            }

            /// Parses an exact (case-sensitive) wire spelling.
            pub fn parse(text: &str) -> Option<Self> {
                match text { $( $wire => Some($name::$variant), )+ _ => None }
            }
        }

        impl $crate::protocol::wire_enum::WireEnum for $name {
            const ALL: &'static [Self] = &[ $( $name::$variant ),+ ];
            fn as_wire(self) -> &'static str { self.as_str() }
            fn from_wire(text: &str) -> Option<Self> { Self::parse(text) }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }
    };
}

pub(crate) use wire_enum;
