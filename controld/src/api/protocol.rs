//! The requests and answers of the control socket.

use crate::spec::ContainerSpec;
use crate::state::{ContainerInfo, SpecChange};
use crate::status::NodeStatus;
use serde::{Deserialize, Serialize};

/// The longest request line the daemon reads.
pub const MAX_LINE: usize = 64 * 1024;

/// How the daemon's error line starts when it turns a connection away because it already
/// serves as many as it may: the client tells "busy" from "refused" by it.
pub const BUSY: &str = "controld is busy";

/// What a client asks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase", deny_unknown_fields)]
pub enum Request {
    /// Adds a container. A transient one belongs to this connection: it is removed once the
    /// connection closes and the container has no live process (`controld exec`).
    Add {
        /// Its declaration.
        container: ContainerSpec,
        /// Whether it lives only as long as this connection.
        #[serde(default)]
        transient: bool,
    },
    /// Changes a container.
    Set {
        /// Which.
        name: String,
        /// What.
        change: SpecChange,
    },
    /// Removes a container.
    Rm {
        /// Which.
        name: String,
        /// Even with live processes (they keep the caps they have mapped).
        #[serde(default)]
        force: bool,
    },
    /// Every container.
    List {},
    /// The node now.
    Status {},
}

/// The daemon's answer to one request.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Response {
    /// Done.
    Ok(Answer),
    /// Refused or failed: one line that says what to do.
    Error(String),
}

/// What a request that succeeded returns.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    /// Nothing to return.
    Done,
    /// The container added or changed.
    Container(ContainerInfo),
    /// Every container.
    Containers(Vec<ContainerInfo>),
    /// The node.
    Status(Box<NodeStatus>),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_read_as_documented() {
        let add: Request = serde_json::from_str(
            r#"{"op":"add","container":{"name":"a","gpus":[0],"memory":"4GiB","compute":"burst:50"}}"#,
        )
        .unwrap();
        assert!(matches!(
            add,
            Request::Add {
                transient: false,
                ..
            }
        ));
        let set: Request =
            serde_json::from_str(r#"{"op":"set","name":"a","change":{"memory":{"cap":"8GiB"}}}"#)
                .unwrap();
        let Request::Set { change, .. } = set else {
            panic!("{set:?}")
        };
        assert_eq!(
            change.memory,
            Some(crate::state::MemoryChange::Cap(crate::spec::MemorySize(
                8 << 30
            )))
        );
        for bad in [
            r#"{"op":"bogus"}"#,
            r#"{"op":"list","extra":1}"#,
            r#"{"op":"rm"}"#,
            r#"{"op":"add","container":{"name":"../x","gpus":[0]}}"#,
            "[]",
            "null",
        ] {
            assert!(serde_json::from_str::<Request>(bad).is_err(), "{bad}");
        }
        let ok = serde_json::to_string(&Response::Ok(Answer::Done)).unwrap();
        assert_eq!(ok, r#"{"ok":"done"}"#);
    }
}
