//! Slow and silent clients hold up no one: with 200 connections to the metrics endpoint
//! and 256 to the control socket that never finish a request, and a client sending a 1 MiB
//! header, a normal scrape and a `status` still answer within a second, and the CLI still
//! works. The metrics endpoint refuses the oversized head and closes silent connections;
//! clients that keep opening connections and sending nothing push only each other out.

mod support;

use std::io::{Read, Write};
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

    // A request head of 1 MiB, sent from a thread of its own: the server stops reading it
    // long before the end, so the writes may block or fail.
    let huge = std::thread::spawn(move || -> String {
        let mut c = TcpStream::connect(metrics).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        c.set_write_timeout(Some(Duration::from_secs(30))).unwrap();
        let head = format!(
            "GET /metrics HTTP/1.1\r\nHost: {metrics}\r\nX-Padding: {}\r\n\r\n",
            "a".repeat(1 << 20)
        );
        let _ = c.write_all(head.as_bytes());
        let mut reply = Vec::new();
        let _ = c.read_to_end(&mut reply);
        String::from_utf8_lossy(&reply).into_owned()
    });

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
    // The oversized head got no metrics: a 431, or a connection closed under it.
    let reply = huge.join().unwrap();
    assert!(
        reply.is_empty() || reply.starts_with("HTTP/1.1 431 "),
        "{}",
        reply.lines().next().unwrap_or("")
    );
    assert!(!reply.contains("tessera_container_info"));
    // A connection that never sends its head is closed by the server, not kept for good.
    let silent = &mut held_tcp[1];
    silent
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut rest = Vec::new();
    let closed = silent.read_to_end(&mut rest);
    assert!(
        closed.is_ok()
            || closed
                .as_ref()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
        "a silent connection stayed open: {closed:?}"
    );
    // The CLI too, with its own patience.
    let out = node.ctl_ok(&["status"]);
    assert!(out.contains("web"), "{out}");
    assert!(node.daemon_alive());
    drop(held_tcp);
    drop(held_unix);
}

/// 20 clients that each keep 30 connections open, replacing one every 20 ms with a new one
/// that sends a byte and waits: 600 connections wanted at once, more than the endpoint
/// keeps, for 20 s. A scraper beside them every 200 ms gets its answer nearly always,
/// where a full endpoint closed every new connection unanswered.
#[test]
fn reconnecting_slow_clients_leave_scrapes_answered() {
    const CLIENTS: usize = 20;
    const HELD: usize = 30;
    let mut node = Node::new("reconnecting");
    let metrics = free_local_addr();
    let config = node.write_config(&format!("[daemon]\nmetrics = \"{metrics}\"\n{CONFIG}"));
    node.start(Some(&config));
    scrape(metrics, Duration::from_secs(30)).unwrap();

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut held = std::collections::VecDeque::new();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    if let Ok(mut c) = TcpStream::connect_timeout(&metrics, Duration::from_secs(1))
                    {
                        let _ = c.write_all(b"G");
                        held.push_back(c);
                    }
                    if held.len() > HELD {
                        held.pop_front();
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        })
        .collect();
    // Let them fill the endpoint first.
    std::thread::sleep(Duration::from_secs(2));
    let started = std::time::Instant::now();
    let (mut asked, mut answered) = (0u32, 0u32);
    let mut failures = Vec::new();
    while started.elapsed() < Duration::from_secs(20) {
        asked += 1;
        match scrape(metrics, Duration::from_secs(2)) {
            Ok(text)
                if text.starts_with("HTTP/1.1 200") && text.contains("tessera_container_info") =>
            {
                answered += 1
            }
            Ok(text) => failures.push(text.lines().next().unwrap_or("(empty)").to_string()),
            Err(e) => failures.push(e.to_string()),
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    eprintln!("{answered} of {asked} scrapes answered beside {CLIENTS} reconnecting slow clients; failures: {failures:?}");
    assert!(
        f64::from(answered) >= 0.95 * f64::from(asked),
        "{answered} of {asked} scrapes answered: {failures:?}"
    );
    assert!(node.daemon_alive());
}
