//! Named choices: the enums that a flag, a file or a report names by a word (`--route
//! least-inflight`, `"format": "bailian"`). The [`choices!`](crate::choices) macro declares
//! such an enum and lists each value's name once; parsing (`FromStr`), `Display`,
//! `Serialize` and the command line's possible values (with each value's doc comment as its
//! help) all come from that list. The engine's enums do not know clap: `cli` turns a
//! [`Choice`] into a value parser.

/// An enum whose values are named by words.
pub trait Choice: Copy + PartialEq + Send + Sync + Sized + 'static {
    /// Every value with its name and its doc-comment lines, in declaration order.
    const ALL: &'static [(Self, &'static str, &'static [&'static str])];

    /// The word this value is named by.
    fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(v, ..)| *v == self)
            .map(|(_, name, _)| *name)
            .expect("choices! lists every value")
    }

    /// The value named `word`, or an error that lists the names.
    fn from_name(word: &str) -> Result<Self, String> {
        Self::ALL
            .iter()
            .find(|(_, name, _)| *name == word)
            .map(|(v, ..)| *v)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::ALL.iter().map(|(_, n, _)| *n).collect();
                format!("unknown value '{word}' (expected {})", names.join(", "))
            })
    }
}

/// A value's doc comment as one line of help: the lines of its first paragraph, joined,
/// without a closing period (as clap writes a doc comment's summary).
pub fn help(doc: &[&str]) -> String {
    let mut line = doc
        .iter()
        .map(|l| l.trim())
        .take_while(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    if line.ends_with('.') && !line.ends_with("..") {
        line.pop();
    }
    line
}

/// Declares an enum of named values:
///
/// ```ignore
/// choices! {
///     /// `--route`.
///     #[derive(Default)]
///     pub enum Route {
///         /// Records in turn.
///         #[default]
///         RoundRobin = "round-robin",
///         Session = "session",
///     }
/// }
/// ```
///
/// The enum derives `Clone, Copy, Debug, PartialEq, Eq` and implements [`Choice`],
/// `FromStr`, `Display` and `Serialize` (as its name).
#[macro_export]
macro_rules! choices {
    (
        $(#[$meta:meta])*
        $vis:vis enum $T:ident {
            $( $(#[$($vattr:tt)*])* $V:ident = $name:literal ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        $vis enum $T { $( $(#[$($vattr)*])* $V ),+ }

        impl $crate::choice::Choice for $T {
            const ALL: &'static [(Self, &'static str, &'static [&'static str])] =
                &[ $( ($T::$V, $name, $crate::choices!(@doc [] $(#[$($vattr)*])*)) ),+ ];
        }

        impl $T {
            /// The word this value is named by.
            $vis fn name(self) -> &'static str {
                $crate::choice::Choice::name(self)
            }
        }

        impl ::std::str::FromStr for $T {
            type Err = String;
            fn from_str(word: &str) -> Result<Self, String> {
                <Self as $crate::choice::Choice>::from_name(word)
            }
        }

        impl ::std::fmt::Display for $T {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str($crate::choice::Choice::name(*self))
            }
        }

        impl ::serde::Serialize for $T {
            fn serialize<S: ::serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str($crate::choice::Choice::name(*self))
            }
        }
    };
    // The doc lines among a value's attributes.
    (@doc [$($d:literal)*]) => { &[ $($d),* ] };
    (@doc [$($d:literal)*] #[doc = $line:literal] $($rest:tt)*) => {
        $crate::choices!(@doc [$($d)* $line] $($rest)*)
    };
    (@doc [$($d:literal)*] #[$($other:tt)*] $($rest:tt)*) => {
        $crate::choices!(@doc [$($d)*] $($rest)*)
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::choices! {
        /// A test enum.
        #[derive(Default)]
        enum Colour {
            /// Like the sky.
            /// On a clear day.
            ///
            /// Not at night.
            #[default]
            Blue = "blue",
            LightGreen = "light-green",
        }
    }

    #[test]
    fn names_parse_print_and_serialise_from_one_list() {
        assert_eq!(Colour::default().name(), "blue");
        assert_eq!("light-green".parse::<Colour>(), Ok(Colour::LightGreen));
        assert_eq!(Colour::LightGreen.to_string(), "light-green");
        assert_eq!(
            serde_json::to_string(&Colour::LightGreen).unwrap(),
            "\"light-green\""
        );
        let err = "red".parse::<Colour>().unwrap_err();
        assert!(
            err.contains("'red'") && err.contains("blue, light-green"),
            "{err}"
        );
        assert_eq!(help(Colour::ALL[0].2), "Like the sky. On a clear day");
        assert!(Colour::ALL[1].2.is_empty());
    }
}
