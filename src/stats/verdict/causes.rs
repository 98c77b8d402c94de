//! The likely cause of a reason, and its fix, from what run.json knows of the client's
//! machine: a reason that only says "late" teaches nothing; one that says "the server at
//! 127.0.0.1:8080 takes this client's cores: give --realtime" can be acted on.

use serde_json::Value;

/// Why the client did not keep its schedule, as far as run.json tells, with the fix.
pub fn late_client(run: Option<&Value>) -> String {
    let Some(run) = run else {
        return "likely cause: the client's machine was busy (give --realtime or --pin-cores, \
                or lower --time-scale)"
            .into();
    };
    let realtime = run["realtime"] == true;
    let pinned = run["pin_cores"].as_str().is_some_and(|p| p != "none");
    let mut fixes = Vec::new();
    if !realtime {
        fixes.push("--realtime (SCHED_FIFO senders; root or CAP_SYS_NICE)");
    }
    let cause = match (run["mock"].is_object(), local_endpoint(run)) {
        (true, _) => {
            fixes.push("a quieter machine");
            "the in-process mock (--mock) runs on the client's own cores".to_string()
        }
        (false, Some(url)) => {
            if !pinned {
                fixes.push("the client and the server pinned to different cores (--pin-cores here, taskset -c there)");
            }
            fixes.push("the server on another host");
            format!("the server at {url} runs on this host and takes the client's cores")
        }
        (false, None) => {
            fixes.push("a quieter client machine");
            match busy(run) {
                Some(load) => format!("this machine was busy ({load})"),
                None => "the client's machine was busy".to_string(),
            }
        }
    };
    let load = busy(run)
        .filter(|_| !cause.starts_with("this machine"))
        .map(|l| format!("; {l}"))
        .unwrap_or_default();
    format!("likely cause: {cause}{load}; fix: {}", fixes.join(", or "))
}

/// "load average 6.2 on 2 cores at the end" where the machine had more runnable threads
/// than cores.
fn busy(run: &Value) -> Option<String> {
    let load = run["host"]["load_avg_1m"].as_f64()?;
    let cpus = run["host"]["cpus"].as_f64()?;
    (load > cpus).then(|| format!("load average {load:.1} on {cpus} cores at the end"))
}

/// The first endpoint on this host (a loopback address), if any.
fn local_endpoint(run: &Value) -> Option<&str> {
    run["endpoints"]
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .find(|url| is_loopback(url_host(url)))
}

/// The host of `scheme://host[:port][/path]` (brackets kept off an IPv6 address).
fn url_host(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or(rest);
    let authority = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if let Some(v6) = authority.strip_prefix('[') {
        return v6.split(']').next().unwrap_or(v6);
    }
    authority.split(':').next().unwrap_or(authority)
}

fn is_loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host == "::1"
        || host
            .parse::<std::net::Ipv4Addr>()
            .is_ok_and(|a| a.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_local_server_is_named_with_the_fixes_that_apply() {
        let run = json!({"endpoints": ["http://10.0.0.5:8000", "http://127.0.0.1:8080/v1"],
                         "mock": null, "realtime": false, "pin_cores": "auto",
                         "host": {"cpus": 2, "load_avg_1m": 3.5}});
        let c = late_client(Some(&run));
        assert!(
            c.contains("server at http://127.0.0.1:8080/v1 runs on this host"),
            "{c}"
        );
        assert!(
            c.contains("--realtime") && c.contains("another host"),
            "{c}"
        );
        assert!(c.contains("load average 3.5 on 2 cores"), "{c}");
        let rt = json!({"endpoints": ["https://[::1]:8443"], "mock": null, "realtime": true,
                        "pin_cores": "0,1"});
        let c = late_client(Some(&rt));
        assert!(
            c.contains("[::1]") && !c.contains("--realtime") && !c.contains("taskset"),
            "{c}"
        );
        let mock = json!({"endpoints": ["http://127.0.0.1:1"], "mock": {}, "realtime": false});
        assert!(late_client(Some(&mock)).contains("in-process mock"));
        let remote = json!({"endpoints": ["http://gpu1:8000"], "mock": null,
                            "host": {"cpus": 2, "load_avg_1m": 5.0}});
        let c = late_client(Some(&remote));
        assert!(c.contains("this machine was busy (load average 5.0"), "{c}");
        assert_eq!(url_host("http://user:pw@localhost:80/x"), "localhost");
    }
}
