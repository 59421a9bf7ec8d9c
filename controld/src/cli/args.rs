//! The command line, declared once: the commands and flags below drive parsing, defaults
//! and help alike.

use std::collections::HashMap;
use std::ffi::OsString;

/// One command: its words, its operands and what it does.
pub struct Command {
    /// `container add`.
    pub words: &'static str,
    /// Operands after the words, for the usage line (`NAME`, `-- CMD ARGS…`).
    pub operands: &'static str,
    /// One line of help.
    pub help: &'static str,
}

/// Every command.
pub const COMMANDS: &[Command] = &[
    Command {
        words: "run",
        operands: "",
        help: "run the daemon (SIGHUP reloads the config; SIGTERM stops it, regions stay)",
    },
    Command {
        words: "container add",
        operands: "NAME",
        help: "add a container",
    },
    Command {
        words: "container set",
        operands: "NAME",
        help: "change a container; its processes see new caps at their next allocation",
    },
    Command {
        words: "container rm",
        operands: "NAME",
        help: "remove a container",
    },
    Command {
        words: "container list",
        operands: "",
        help: "list the containers",
    },
    Command {
        words: "status",
        operands: "",
        help: "per GPU: containers, policy, priority, memory used/cap, shares, processes",
    },
    Command {
        words: "exec",
        operands: "-- CMD [ARGS...]",
        help: "run CMD in a transient container, removed when it exits; exits with its code",
    },
    Command {
        words: "cdi",
        operands: "",
        help: "print a CDI spec with a device tessera.dev/container=NAME per container (or write it with --output)",
    },
    Command {
        words: "demo",
        operands: "",
        help: "three containers share one GPU (simgpu's when there is none): a live view, then a summary",
    },
];

/// One option: `--name VALUE`, or `--name` alone when `value` is empty.
pub struct Flag {
    /// Its name after `--`.
    pub name: &'static str,
    /// Another name it answers to.
    pub alias: Option<&'static str>,
    /// What its value looks like; empty for a switch.
    pub value: &'static str,
    /// The commands that take it (`*` for every command).
    pub commands: &'static [&'static str],
    /// One line of help.
    pub help: &'static str,
}

const CLIENTS: &[&str] = &[
    "container add",
    "container set",
    "container rm",
    "container list",
    "status",
    "exec",
    "cdi",
];

/// Every option.
pub const FLAGS: &[Flag] = &[
    Flag {
        name: "config",
        alias: None,
        value: "FILE",
        commands: &["*"],
        help: "config file (default /etc/tessera/controld.toml; clients read only its [daemon])",
    },
    Flag {
        name: "state-dir",
        alias: None,
        value: "DIR",
        commands: &["*"],
        help: "state dir: regions and the control socket (default $TESSERA_STATE_DIR, the config's, /run/tessera)",
    },
    Flag {
        name: "socket",
        alias: None,
        value: "PATH",
        commands: CLIENTS,
        help: "control socket (default <state dir>/control.sock)",
    },
    Flag {
        name: "name",
        alias: None,
        value: "NAME",
        commands: &["exec"],
        help: "the transient container's name (default exec-<pid>)",
    },
    Flag {
        name: "gpus",
        alias: Some("gpu"),
        value: "G[,G...]",
        commands: &["container add", "container set", "exec"],
        help: "GPU indices it may use (default 0)",
    },
    Flag {
        name: "memory",
        alias: None,
        value: "SIZE",
        commands: &["container add", "container set", "exec"],
        help: "memory cap per GPU, like 4GiB, or unlimited (default unlimited)",
    },
    Flag {
        name: "compute",
        alias: None,
        value: "POLICY",
        commands: &["container add", "container set", "exec"],
        help: "fixed:Q, burst:Q or best-effort (default best-effort)",
    },
    Flag {
        name: "priority",
        alias: None,
        value: "CLASS",
        commands: &["container add", "container set", "exec"],
        help: "online or offline (default online)",
    },
    Flag {
        name: "force",
        alias: None,
        value: "",
        commands: &["container rm"],
        help: "remove it even while its processes run (they keep their caps)",
    },
    Flag {
        name: "json",
        alias: None,
        value: "",
        commands: &["container list", "status"],
        help: "print JSON",
    },
    Flag {
        name: "output",
        alias: None,
        value: "FILE",
        commands: &["cdi"],
        help: "write the spec to FILE, like /etc/cdi/tessera.json, instead of printing it",
    },
    Flag {
        name: "seconds",
        alias: None,
        value: "N",
        commands: &["demo"],
        help: "how long the demo's workloads run (default 15)",
    },
    Flag {
        name: "no-live",
        alias: None,
        value: "",
        commands: &["demo"],
        help: "print only the start and the summary",
    },
    Flag {
        name: "simgpu",
        alias: None,
        value: "",
        commands: &["demo"],
        help: "use a simulated GPU even where a real one is present",
    },
];

/// The help text.
pub fn help() -> String {
    let mut h = String::from(
        "controld: the Tessera node daemon and its CLI\n\nusage: controld <command> [options]\n\ncommands:\n",
    );
    for c in COMMANDS {
        let usage = format!("{} {}", c.words, c.operands);
        h += &format!("  {usage:<32} {}\n", c.help);
    }
    h += "\noptions:\n";
    for f in FLAGS {
        let mut flag = format!("--{}", f.name);
        if !f.value.is_empty() {
            flag += &format!(" {}", f.value);
        }
        let commands = if f.commands == ["*"] {
            "all".to_string()
        } else {
            f.commands.join(", ")
        };
        h += &format!("  {flag:<22} {} [{commands}]\n", f.help);
    }
    h += "  -h, --help             this text\n";
    h
}

/// A command line, checked against [`COMMANDS`] and [`FLAGS`].
#[derive(Debug, Default)]
pub struct Args {
    /// The command's words.
    pub command: &'static str,
    /// Operands.
    pub operands: Vec<String>,
    /// Flag values by name (switches map to an empty string).
    pub flags: HashMap<&'static str, String>,
    /// Everything after `--`.
    pub rest: Vec<OsString>,
}

impl Args {
    /// A flag's value.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.flags.get(name).map(String::as_str)
    }

    /// Whether a switch is on.
    pub fn on(&self, name: &str) -> bool {
        self.flags.contains_key(name)
    }
}

/// What the command line asks.
#[derive(Debug)]
pub enum Parsed {
    /// `-h`, `--help`, or nothing.
    Help,
    /// A command.
    Run(Args),
}

/// Reads a command line (without the program name). The error is a one-line usage message.
pub fn parse(argv: Vec<OsString>) -> Result<Parsed, String> {
    let mut argv = argv.into_iter();
    let mut words: Vec<String> = Vec::new();
    let mut args = Args::default();
    let mut pending: Vec<String> = Vec::new();
    // The command: the longest run of leading words that names one.
    for arg in argv.by_ref() {
        let Some(text) = arg.to_str().map(str::to_string) else {
            return Err(format!("{arg:?} is not valid UTF-8"));
        };
        if text == "-h" || text == "--help" {
            return Ok(Parsed::Help);
        }
        if text.starts_with('-') {
            pending.push(text);
            break;
        }
        words.push(text);
        let joined = words.join(" ");
        if let Some(c) = COMMANDS.iter().find(|c| c.words == joined) {
            args.command = c.words;
            break;
        }
        if !COMMANDS
            .iter()
            .any(|c| c.words.starts_with(&(joined.clone() + " ")))
        {
            return Err(format!("unknown command `{joined}`; run controld --help"));
        }
    }
    if args.command.is_empty() {
        if words.is_empty() && pending.is_empty() {
            return Ok(Parsed::Help);
        }
        return Err(format!(
            "incomplete command `{}`; run controld --help",
            words.join(" ")
        ));
    }
    let mut rest = pending.into_iter().map(OsString::from).chain(argv);
    while let Some(arg) = rest.next() {
        let Some(text) = arg.to_str().map(str::to_string) else {
            return Err(format!("{arg:?} is not valid UTF-8"));
        };
        if text == "--" {
            args.rest = rest.collect();
            break;
        }
        if text == "-h" || text == "--help" {
            return Ok(Parsed::Help);
        }
        let Some(flag_text) = text.strip_prefix("--") else {
            if text.starts_with('-') && text.len() > 1 {
                return Err(format!("unknown option `{text}`; run controld --help"));
            }
            args.operands.push(text);
            continue;
        };
        let (name, inline) = match flag_text.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (flag_text, None),
        };
        let flag = FLAGS
            .iter()
            .find(|f| f.name == name || f.alias == Some(name))
            .filter(|f| f.commands == ["*"] || f.commands.contains(&args.command))
            .ok_or_else(|| {
                format!(
                    "`controld {}` takes no option --{name}; run controld --help",
                    args.command
                )
            })?;
        let value = if flag.value.is_empty() {
            if inline.is_some() {
                return Err(format!("--{name} takes no value"));
            }
            String::new()
        } else {
            match inline {
                Some(v) => v,
                None => rest
                    .next()
                    .and_then(|v| v.into_string().ok())
                    .ok_or_else(|| format!("--{name} needs a value ({})", flag.value))?,
            }
        };
        if args.flags.insert(flag.name, value).is_some() {
            return Err(format!("--{name} is given twice"));
        }
    }
    let command = COMMANDS
        .iter()
        .find(|c| c.words == args.command)
        .expect("found above");
    let wants = if command.operands.starts_with("NAME") {
        1
    } else {
        0
    };
    if args.operands.len() != wants {
        return Err(format!(
            "usage: controld {} {}",
            command.words, command.operands
        ));
    }
    if command.operands.starts_with("--") && args.rest.is_empty() {
        return Err(format!(
            "usage: controld {} [options] {}",
            command.words, command.operands
        ));
    }
    Ok(Parsed::Run(args))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(line: &str) -> Result<Parsed, String> {
        parse(line.split_whitespace().map(OsString::from).collect())
    }

    #[test]
    fn commands_and_flags() {
        let Parsed::Run(a) = p("container add web --gpu 0,1 --memory=4GiB").unwrap() else {
            panic!()
        };
        assert_eq!(a.command, "container add");
        assert_eq!(a.operands, ["web"]);
        assert_eq!(a.get("gpus"), Some("0,1"));
        assert_eq!(a.get("memory"), Some("4GiB"));
        let Parsed::Run(a) = p("exec --memory 2GiB -- gpuload alloc --chunk 1").unwrap() else {
            panic!()
        };
        assert_eq!(a.rest, ["gpuload", "alloc", "--chunk", "1"]);
        assert!(matches!(p("").unwrap(), Parsed::Help));
        assert!(matches!(p("status --help").unwrap(), Parsed::Help));
    }

    #[test]
    fn mistakes_are_one_line() {
        for bad in [
            "bogus",
            "container",
            "container add",
            "container add a b",
            "status --force",
            "status --json --json",
            "container add a --memory",
            "exec --memory 1g",
            "status -x",
        ] {
            let err = p(bad).expect_err(bad);
            assert!(!err.contains('\n'), "{err}");
        }
        assert!(help().contains("container add NAME"));
    }
}
