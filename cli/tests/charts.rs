//! Charts and documents that carry report strings ([23] 13, 24): `plot`'s SVG stays
//! well-formed XML (parsed by Python's expat) whatever a host name holds, and
//! `--format markdown` never turns a title into markup. `CULEDGER_CLI=/path/to/old/culedger`
//! runs these against another build.

mod common;
use common::*;
use serde_json::Value;
use std::process::Command;

/// The nccl fixture with every process's host and title replaced.
fn with_names(host: &str, title: &str) -> tempfile::TempDir {
    let d = tempdir();
    for e in std::fs::read_dir(fixtures().join("nccl")).unwrap().flatten() {
        let mut v: Value = serde_json::from_slice(&std::fs::read(e.path()).unwrap()).unwrap();
        v["process"]["host"] = host.into();
        v["process"]["title"] = title.into();
        std::fs::write(d.path().join(e.file_name()), serde_json::to_vec(&v).unwrap()).unwrap();
    }
    d
}

#[test]
fn control_characters_in_a_host_name_keep_the_svg_well_formed() {
    let d = with_names("node\u{1b}[31m\u{7}\u{0}-7", "t\u{8}x");
    let out = d.path().join("p.svg");
    let o = culedger(&["plot", d.path().to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let parsed = Command::new("python3")
        .args(["-c", "import sys, xml.dom.minidom; xml.dom.minidom.parse(sys.argv[1]); print('ok')"])
        .arg(&out)
        .output()
        .expect("python3");
    assert_eq!(stdout(&parsed).trim(), "ok", "{}", stderr(&parsed));
    let svg = std::fs::read_to_string(&out).unwrap();
    assert!(svg.contains("node\\x1b[31m\\x07\\x00-7"), "the host stays readable");
}

#[test]
fn markdown_never_turns_a_title_into_markup() {
    let d = with_names("<img src=x onerror=alert(1)>", "sched <!-- hidden & <b>bold</b>");
    let o = culedger(&["report", d.path().to_str().unwrap(), "--format", "markdown"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let md = stdout(&o);
    assert!(!md.contains("<img") && !md.contains("<!--") && !md.contains("<b>"), "{md}");
    assert!(md.contains("&lt;img src=x onerror=alert(1)&gt;"), "{md}");
    assert!(md.contains("sched &lt;!-- hidden &amp; &lt;b&gt;bold&lt;/b&gt;"), "{md}");
    let o = culedger(&["check", d.path().to_str().unwrap(), "--budget", "ipc<=64MiB", "--format", "markdown"]);
    let md = stdout(&o);
    assert!(!md.contains("<img"), "{md}");
    assert!(md.contains("`ipc<=64MiB`"), "a budget stays code: {md}");
}

/// The data the HTML page draws from (its `culedger-data` script).
fn page_data(page: &str) -> Value {
    let start = page.find("<script id=\"culedger-data\" type=\"application/json\">").unwrap();
    let rest = &page[start..];
    let body = &rest[rest.find('>').unwrap() + 1..rest.find("</script>").unwrap()];
    serde_json::from_str(body).unwrap()
}

#[test]
fn allocations_of_the_last_millisecond_are_drawn() {
    // A process whose whole life is one millisecond: its records are stamped in µs, its end
    // in (truncated) ms.
    let d = tempdir();
    let mut v: Value =
        serde_json::from_slice(&std::fs::read(fixtures().join("nccl/culedger-4101.json")).unwrap()).unwrap();
    let start_ms = v["process"]["start_unix_ms"].as_i64().unwrap();
    v["process"]["start_unix_us"] = (start_ms * 1000).into();
    v["process"]["end_unix_ms"] = start_ms.into();
    let sample = |t_us: i64, bytes: i64| {
        serde_json::json!({"t_ms": 0, "t_us": t_us, "seq": t_us, "live_bytes": bytes, "other": bytes,
                           "weights": 0, "kv_pool": 0, "ipc": 0, "graphs": 0, "comm": 0})
    };
    v["devices"][0]["timeline"] = serde_json::json!([sample(100, 1 << 20), sample(600, 2 << 20)]);
    std::fs::write(d.path().join("culedger-4101.json"), serde_json::to_vec(&v).unwrap()).unwrap();
    let out = d.path().join("p.html");
    let o = culedger(&["html", d.path().to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let data = page_data(&std::fs::read_to_string(&out).unwrap());
    let chart = &data["runs"][0]["charts"][0];
    let other: Vec<i64> = chart["cats"]["other"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
    assert_eq!(other.iter().max(), Some(&(2 << 20)), "{chart}");
}

/// The points of the SVG element at `at` (`points="x,y x,y ..."`).
fn points(svg: &str, at: usize) -> Vec<(f64, f64)> {
    let start = at + svg[at..].find("points=\"").unwrap() + "points=\"".len();
    let end = start + svg[start..].find('"').unwrap();
    svg[start..end]
        .split(' ')
        .map(|p| {
            let (x, y) = p.split_once(',').unwrap();
            (x.parse().unwrap(), y.parse().unwrap())
        })
        .collect()
}

/// `plot` of the custom all-reduce failure ([24] item 6): what follows the sizing query is
/// tinted behind the memory (its rectangle drawn before the areas: over them it greyed the
/// weights, the dark overlay between the query and the failure), and the untracked band
/// sits on the tracked areas (its lower edge is the stack's top at every step: drawn from
/// each query's tracked figure, it lay over the weights loaded after a query).
#[test]
fn plot_draws_nothing_over_the_memory() {
    let d = tempdir();
    let out = d.path().join("p.svg");
    let o = culedger(&["plot", fixtures().join("custom-ar").to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let svg = std::fs::read_to_string(&out).unwrap();
    let panels: Vec<&str> = svg.split("<g class=\"panel\"").skip(1).collect();
    assert_eq!(panels.len(), 2);
    for p in panels {
        let span = p.find("fill=\"#ff7f0e\" fill-opacity=\"0.12\"").expect("the span after the sizing query");
        let first_area = p.find("class=\"area ").unwrap();
        let behind = span < first_area && !p[first_area..].contains("fill-opacity=\"0.12\"");
        // The top of the stack: the upper edge of the last area drawn (the first half of its
        // points, as steps).
        let top_area = p.rfind("class=\"area ").unwrap();
        let top = points(p, top_area);
        let upper = &top[..top.len() / 2];
        let band_at = p.find("class=\"band untracked\"").unwrap();
        let band = points(p, band_at);
        let lower = &band[band.len() / 2..];
        let (x0, x1) = (upper[0].0, upper[upper.len() - 1].0);
        let mut checked = 0;
        for (x, y) in lower.iter().filter(|(x, _)| *x > x0 && *x < x1) {
            let on = upper.windows(2).any(|w| w[0].0 <= *x && *x <= w[1].0 && (w[0].1 - w[1].1).abs() < 1e-9 && (w[0].1 - y).abs() < 0.15);
            assert!(on, "the band's lower edge at ({x}, {y}) is not the stack's top");
            checked += 1;
        }
        assert!(checked > 10, "{checked} points of the band checked");
        assert!(behind, "the span is drawn behind the areas, nothing tinted over them");
    }
}

/// `plot` of nccl's rank 0 made a process whose whole life is its first millisecond.
fn plot_of_a_first_millisecond() -> String {
    let d = tempdir();
    let mut v: Value =
        serde_json::from_slice(&std::fs::read(fixtures().join("nccl/culedger-4101.json")).unwrap()).unwrap();
    let start_ms = v["process"]["start_unix_ms"].as_i64().unwrap();
    v["process"]["start_unix_us"] = (start_ms * 1000).into();
    v["process"]["end_unix_ms"] = start_ms.into();
    let sample = |t_us: i64, bytes: i64| {
        serde_json::json!({"t_ms": 0, "t_us": t_us, "seq": t_us, "live_bytes": bytes, "other": bytes,
                           "weights": 0, "kv_pool": 0, "ipc": 0, "graphs": 0, "comm": 0})
    };
    v["devices"][0]["timeline"] = serde_json::json!([sample(100, 1 << 20), sample(600, 2 << 20)]);
    std::fs::write(d.path().join("culedger-4101.json"), serde_json::to_vec(&v).unwrap()).unwrap();
    let out = d.path().join("p.svg");
    let o = culedger(&["plot", d.path().to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let svg = std::fs::read_to_string(&out).unwrap();
    svg
}

/// A process whose whole life is its first millisecond (its records stamped in µs, its end in
/// truncated ms), as a program of a few milliseconds gives: `plot` draws it (it refused it,
/// "--to (0.000s) must come after --from (0.001s)", with neither given), the window reaching
/// its last record.
#[test]
fn plot_of_a_run_that_ends_within_its_first_millisecond() {
    let svg = plot_of_a_first_millisecond();
    assert!(svg.contains("class=\"area other\""), "the memory is drawn");
}

/// A run within its first millisecond gets time ticks that say where they are: each label
/// once (they all read `0.000s`, the axis's µs ticks written in milliseconds), in order.
#[test]
fn sub_millisecond_ticks_are_told_apart() {
    let svg = plot_of_a_first_millisecond();
    // The time axis's labels: centred texts that are a number of seconds.
    let labels: Vec<&str> = svg
        .split("</text>")
        .filter_map(|t| t.rsplit_once("text-anchor=\"middle\""))
        .filter_map(|(_, t)| t.split_once('>').map(|(_, text)| text.trim()))
        .filter(|t| t.ends_with('s') && t[..t.len() - 1].parse::<f64>().is_ok())
        .collect();
    assert!(labels.len() >= 3, "{labels:?}");
    let secs: Vec<f64> = labels.iter().map(|t| t[..t.len() - 1].parse().unwrap()).collect();
    assert!(secs.windows(2).all(|w| w[0] < w[1]), "each tick once, in order: {labels:?}");
}

/// A category of a program's own named like a part the charts draw themselves (`untracked`,
/// `driver_costs`) is shown as `own:NAME` in the page's chart and picture and in `plot`'s
/// legend: it was drawn under the untracked band's name (two `untracked` series, one
/// overwriting the other's values on the page) and in the driver costs' colour.
#[test]
fn own_categories_named_like_chart_parts_stay_apart() {
    let d = tempdir();
    for e in std::fs::read_dir(fixtures().join("nccl")).unwrap().flatten() {
        let mut v: Value = serde_json::from_slice(&std::fs::read(e.path()).unwrap()).unwrap();
        for dev in v["devices"].as_array_mut().unwrap() {
            if dev["index"] != 1 {
                continue;
            }
            for s in dev["timeline"].as_array_mut().unwrap().iter_mut().skip(1) {
                s["untracked"] = (6 << 20).into();
                s["driver_costs"] = (3 << 20).into();
                s["live_bytes"] = (s["live_bytes"].as_i64().unwrap() + (9 << 20)).into();
            }
        }
        std::fs::write(d.path().join(e.file_name()), serde_json::to_vec(&v).unwrap()).unwrap();
    }
    let page = d.path().join("p.html");
    let o = culedger(&["html", d.path().to_str().unwrap(), "-o", page.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let data = page_data(&std::fs::read_to_string(&page).unwrap());
    let gpu1 = data["runs"][0]["charts"].as_array().unwrap().iter().find(|c| c["index"] == 1).unwrap();
    for (own, bytes) in [("untracked", 6i64 << 20), ("driver_costs", 3 << 20)] {
        assert!(gpu1["cats"].get(own).is_none(), "{own} among the chart's categories: {}", gpu1["cats"]);
        let series = gpu1["cats"][format!("own:{own}")].as_array().unwrap_or_else(|| panic!("own:{own}: {}", gpu1["cats"]));
        assert_eq!(series.iter().filter_map(Value::as_i64).max(), Some(bytes), "own:{own}");
        assert!(gpu1["at"]["cats"].get(own).is_none(), "{own} in the picture: {}", gpu1["at"]);
    }
    let out = d.path().join("p.svg");
    let o = culedger(&["plot", d.path().to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let svg = std::fs::read_to_string(&out).unwrap();
    assert!(svg.contains("own:untracked") && svg.contains("own:driver_costs"), "plot's legend");
}
