//! The APIs the mock answers, by the route a request came to (the prefix cache reads the
//! prompt from each one's body).

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    Chat,
    Completions,
    /// TGI's `/generate_stream` (`stream`) or `/generate`.
    Tgi {
        stream: bool,
    },
}
