//! The CLI: one short function per command, each a thin client of the control socket (or,
//! for `run`, of [`crate::daemon`]). Errors reach the user as one line.

pub mod args;
mod render;

use crate::api::{Answer, Client, Request};
use crate::config::{Config, DEFAULT_PATH};
use crate::policy::{ComputePolicy, Priority};
use crate::spec::{ContainerName, ContainerSpec, Gpus, MemorySize};
use crate::state::{MemoryChange, SpecChange};
use args::{Args, Parsed};
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};

pub use render::render_status;

/// Runs the command line (without the program name); returns the exit status.
pub fn main(argv: Vec<OsString>) -> i32 {
    let args = match args::parse(argv) {
        Ok(Parsed::Help) => {
            return print(&args::help());
        }
        Ok(Parsed::Run(args)) => args,
        Err(usage) => {
            eprintln!("controld: {usage}");
            return 2;
        }
    };
    match dispatch(&args) {
        Ok(code) => code,
        Err(message) => {
            eprintln!("controld: {message}");
            1
        }
    }
}

/// Prints to stdout; a closed pipe (`controld status | head`) is not an error.
fn print(text: &str) -> i32 {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => 0,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => 0,
        Err(e) => {
            eprintln!("controld: cannot write the output: {e}");
            1
        }
    }
}

fn dispatch(args: &Args) -> Result<i32, String> {
    match args.command {
        "run" => {
            let options = crate::daemon::Options {
                config: args.get("config").map(PathBuf::from),
                state_dir: args.get("state-dir").map(PathBuf::from),
            };
            crate::daemon::run(&options).map_err(|e| e.to_string())?;
            Ok(0)
        }
        "container add" => {
            let spec = ContainerSpec {
                name: ContainerName::new(&args.operands[0]).map_err(|e| e.to_string())?,
                gpus: gpus(args)?.unwrap_or_else(|| Gpus::new(vec![0]).expect("valid")),
                memory: memory(args)?.and_then(|m| match m {
                    MemoryChange::Cap(size) => Some(size),
                    MemoryChange::Unlimited => None,
                }),
                compute: compute(args)?.unwrap_or_default(),
                priority: priority(args)?.unwrap_or_default(),
            };
            let answer = call(
                args,
                &Request::Add {
                    container: spec,
                    transient: false,
                },
            )?;
            Ok(print_container(answer))
        }
        "container set" => {
            let change = SpecChange {
                gpus: gpus(args)?,
                memory: memory(args)?,
                compute: compute(args)?,
                priority: priority(args)?,
            };
            if change == SpecChange::default() {
                return Err(
                    "nothing to change; give --gpus, --memory, --compute or --priority".into(),
                );
            }
            let name = args.operands[0].clone();
            let answer = call(args, &Request::Set { name, change })?;
            Ok(print_container(answer))
        }
        "container rm" => {
            let name = args.operands[0].clone();
            call(
                args,
                &Request::Rm {
                    name: name.clone(),
                    force: args.on("force"),
                },
            )?;
            Ok(print(&format!("removed {name}\n")))
        }
        "container list" => {
            let Answer::Containers(list) = call(args, &Request::List {})? else {
                return Err(unexpected());
            };
            if args.on("json") {
                return Ok(print(&json(&list)));
            }
            let mut out = format!(
                "{:<24} {:<8} {:<12} {:<12} {:<9} {}\n",
                "NAME", "GPUS", "MEMORY", "COMPUTE", "PRIORITY", "ORIGIN"
            );
            for c in &list {
                out += &format!(
                    "{:<24} {:<8} {:<12} {:<12} {:<9} {}\n",
                    c.spec.name,
                    c.spec.gpus.to_string(),
                    c.spec
                        .memory
                        .map_or("unlimited".to_string(), |m| m.to_string()),
                    c.spec.compute.to_string(),
                    c.spec.priority.to_string(),
                    serde_json::to_value(c.origin)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string))
                        .unwrap_or_default()
                );
            }
            Ok(print(&out))
        }
        "status" => {
            let Answer::Status(status) = call(args, &Request::Status {})? else {
                return Err(unexpected());
            };
            if args.on("json") {
                return Ok(print(&json(&status)));
            }
            Ok(print(&render_status(&status)))
        }
        "exec" => {
            let name = match args.get("name") {
                Some(n) => ContainerName::new(n).map_err(|e| e.to_string())?,
                None => ContainerName::new(&format!("exec-{}", std::process::id()))
                    .expect("a valid name"),
            };
            let spec = ContainerSpec {
                name,
                gpus: gpus(args)?.unwrap_or_else(|| Gpus::new(vec![0]).expect("valid")),
                memory: memory(args)?.and_then(|m| match m {
                    MemoryChange::Cap(size) => Some(size),
                    MemoryChange::Unlimited => None,
                }),
                compute: compute(args)?.unwrap_or_default(),
                priority: priority(args)?.unwrap_or_default(),
            };
            crate::exec::exec(&socket(args)?, spec, &args.rest).map_err(|e| e.to_string())
        }
        "demo" => {
            let seconds = match args.get("seconds") {
                Some(s) => s.parse().ok().filter(|&n| n > 0).ok_or_else(|| {
                    format!("--seconds {s}: give a whole number of seconds, like 15")
                })?,
                None => crate::demo::DEFAULT_SECONDS,
            };
            let options = crate::demo::Options {
                seconds,
                live: !args.on("no-live"),
                force_simgpu: args.on("simgpu"),
            };
            crate::demo::run(&options).map_err(|e| e.to_string())
        }
        "cdi" => {
            let Answer::Containers(list) = call(args, &Request::List {})? else {
                return Err(unexpected());
            };
            let library = crate::exec::preload_library().map_err(|e| e.to_string())?;
            let spec = json(&crate::cdi::spec(&list, &library));
            match args.get("output") {
                Some(path) => {
                    std::fs::write(path, spec)
                        .map_err(|e| format!("cannot write the CDI spec to {path}: {e}"))?;
                    Ok(0)
                }
                None => Ok(print(&spec)),
            }
        }
        other => Err(format!("unknown command `{other}`; run controld --help")),
    }
}

fn unexpected() -> String {
    "controld answered something unexpected; use a CLI of the same release as the daemon".into()
}

fn json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string_pretty(value).expect("plain data serializes") + "\n"
}

fn print_container(answer: Answer) -> i32 {
    match answer {
        Answer::Container(c) => print(&format!(
            "{}: gpus {}, memory {}, compute {}, priority {}; region {}\n",
            c.spec.name,
            c.spec.gpus,
            c.spec
                .memory
                .map_or("unlimited".to_string(), |m| m.to_string()),
            c.spec.compute,
            c.spec.priority,
            c.region.display()
        )),
        _ => 0,
    }
}

fn gpus(args: &Args) -> Result<Option<Gpus>, String> {
    args.get("gpus")
        .map(|g| Gpus::parse(g).map_err(|e| e.to_string()))
        .transpose()
}

fn memory(args: &Args) -> Result<Option<MemoryChange>, String> {
    args.get("memory")
        .map(|m| {
            if m.trim() == "unlimited" {
                Ok(MemoryChange::Unlimited)
            } else {
                tessera_region::units::parse_size(m)
                    .map(|b| MemoryChange::Cap(MemorySize(b)))
                    .map_err(|e| e.to_string())
            }
        })
        .transpose()
}

fn compute(args: &Args) -> Result<Option<ComputePolicy>, String> {
    args.get("compute")
        .map(|c| {
            c.parse()
                .map_err(|e: crate::policy::PolicyError| e.to_string())
        })
        .transpose()
}

fn priority(args: &Args) -> Result<Option<Priority>, String> {
    args.get("priority")
        .map(|c| {
            c.parse()
                .map_err(|e: crate::policy::PolicyError| e.to_string())
        })
        .transpose()
}

/// The control socket: `--socket`, else the config's `[daemon]` settings, else
/// `<state dir>/control.sock`.
fn socket(args: &Args) -> Result<PathBuf, String> {
    if let Some(s) = args.get("socket") {
        return Ok(PathBuf::from(s));
    }
    let config = match args.get("config") {
        Some(path) => Some(Config::load(Path::new(path)).map_err(|e| e.to_string())?),
        // The default config is read only if it is there and good; the daemon reports it.
        None => Config::load(Path::new(DEFAULT_PATH)).ok(),
    };
    let dir = crate::daemon::state_dir(args.get("state-dir").map(Path::new), config.as_ref());
    Ok(crate::daemon::socket_path(&dir, config.as_ref()))
}

fn call(args: &Args, request: &Request) -> Result<Answer, String> {
    let mut client = Client::connect(&socket(args)?).map_err(|e| e.to_string())?;
    client.call(request).map_err(|e| e.to_string())
}
