//! Slow and silent clients hold up no one: with 200 connections to the metrics endpoint
//! and 256 to the control socket that never finish a request, a normal scrape and a
//! `status` still answer within a second, and the CLI still works.

mod support;

use std::io::Write;
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::time::Duration;
use support::*;
use tessera_controld::api::{Answer, Client, Request};

const CONFIG: &str = r#"
[[container]]
name = "web"
gpus = [0]
memory = "1GiB"
"#;

/// Whether `attempt` succeeds within its own one-second bound, at least once in three tries
/// (a loaded machine may lose one to scheduling; a server held up by slow clients loses all).
fn within_a_second(what: &str, mut attempt: impl FnMut() -> Result<(), String>) {
    let mut errors = Vec::new();
    for _ in 0..3 {
        let started = std::time::Instant::now();
        match attempt() {
            Ok(()) => {
                eprintln!("{what} answered in {:?}", started.elapsed());
                return;
            }
            Err(e) => errors.push(e),
        }
    }
    panic!("{what} did not answer within 1 s: {errors:?}");
}

#[test]
fn slow_clients_hold_up_neither_metrics_nor_status() {
    let mut node = Node::new("slow");
    let metrics = free_local_addr();
    let config = node.write_config(&format!("[daemon]\nmetrics = \"{metrics}\"\n{CONFIG}"));
    node.start(Some(&config));
    // The first status reads every process of the node once; take it before timing.
    scrape(metrics, Duration::from_secs(30)).unwrap();
    node.status();

    let mut held_tcp: Vec<TcpStream> = Vec::new();
    for i in 0..200 {
        let mut c = TcpStream::connect(metrics).unwrap();
        if i % 2 == 0 {
            // A request begun and never finished.
            c.write_all(b"GET /met").unwrap();
        }
        held_tcp.push(c);
    }
    let mut held_unix: Vec<UnixStream> = Vec::new();
    for i in 0..256 {
        let mut c = UnixStream::connect(node.socket()).unwrap();
        if i % 2 == 0 {
            c.write_all(b"{\"op\":").unwrap();
        }
        held_unix.push(c);
    }

    within_a_second("a scrape", || {
        let text = scrape(metrics, Duration::from_secs(1)).map_err(|e| e.to_string())?;
        if text.starts_with("HTTP/1.1 200") && text.contains("tessera_container_info") {
            Ok(())
        } else {
            Err(text.lines().next().unwrap_or("").to_string())
        }
    });
    within_a_second("status", || {
        let mut client = Client::connect_with_patience(&node.socket(), Duration::from_secs(1))
            .map_err(|e| e.to_string())?;
        match client.call(&Request::Status {}) {
            Ok(Answer::Status(status)) if status.containers.len() == 1 => Ok(()),
            Ok(_) => Err("an odd answer".to_string()),
            Err(e) => Err(e.to_string()),
        }
    });
    // The CLI too, with its own patience.
    let out = node.ctl_ok(&["status"]);
    assert!(out.contains("web"), "{out}");
    assert!(node.daemon_alive());
    drop(held_tcp);
    drop(held_unix);
}
