//! The pure core: identifiers, states and their legal transitions, input validation and event
//! payloads. Nothing here does I/O or knows about diesel or actix.

/// Declares a state enum with its one spelling per value (what the database stores):
/// `as_str`, `ALL`, `Display`, and `FromStr`, where an unknown spelling is an
/// [`upload::UnknownState`].
macro_rules! spelled_states {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $spelling:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [Self] = &[$(Self::$variant),+];

            /// The database spelling.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $spelling,)+
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        /// A state equals its spelling (tests and logs compare with the database's words).
        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl std::str::FromStr for $name {
            type Err = $crate::domain::upload::UnknownState;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($spelling => Ok(Self::$variant),)+
                    other => Err($crate::domain::upload::UnknownState(other.to_owned())),
                }
            }
        }
    };
}

pub mod api_key;
pub mod artifact;
pub mod client_address;
pub mod delivery;
pub mod destination;
pub mod event;
pub mod failure;
pub mod hls;
pub mod ids;
pub mod init_segment;
pub mod job;
pub mod keys;
pub mod media;
pub mod open_work;
pub mod playback_token;
pub mod reconcile;
pub mod recording;
pub mod retry;
pub mod signature;
pub mod sink;
pub mod split;
pub mod sweep;
pub mod timeline;
pub mod tus;
pub mod upload;
pub mod video;
