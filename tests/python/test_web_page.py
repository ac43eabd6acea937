"""The web page at `/` in a real browser: headless Chromium driven over WebDriver (selenium + the Debian
`chromium-driver`). It loads `/` from an `agentd serve` that needs an API key, enters the key, chats with the real
model (streamed text appears, usage and tokens/s are shown), starts an agent session that runs a real `read`,
lists the session, shows the tree, and takes screenshots at 1280x800 and at a phone's width. Any console error
fails the test.

Skipped when selenium or chromedriver is missing, unless AGENTD_REQUIRE_BROWSER=1 (`.ci/run` sets it, so CI fails
instead of skipping). Screenshots go to $AGENTD_SCREENSHOTS (default: a temp dir; the path is printed).
"""

import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from conftest import API_KEY, Server

try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError:  # pragma: no cover - depends on the machine
    webdriver = None

REQUIRED = os.environ.get("AGENTD_REQUIRE_BROWSER") == "1"


def chromedriver() -> str | None:
    for name in ("chromedriver", "/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver"):
        found = shutil.which(name) or (name if os.path.exists(name) else None)
        if found:
            return found
    return None


def browser():
    if webdriver is None or chromedriver() is None:
        why = "selenium is not installed" if webdriver is None else "chromedriver is not installed"
        if REQUIRED:
            pytest.fail(f"the browser test is required here but {why} (apt-get install chromium-driver)")
        pytest.skip(why)
    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,800",
                "--disable-gpu", "--no-first-run"):
        options.add_argument(arg)
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary:
        options.binary_location = binary
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(chromedriver()), options=options)


@pytest.fixture(scope="module")
def workspace():
    with tempfile.TemporaryDirectory() as d:
        Path(d, "notes.txt").write_text("The secret word is PAPAYA.\n")
        yield d


@pytest.fixture(scope="module")
def page_server(workspace):
    srv = Server("--model", "qwen2.5-coder-0.5b-instruct", "--workspace", workspace)
    yield srv
    srv.stop()


def console_errors(driver):
    return [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def wait(driver, what, predicate, timeout=120):
    try:
        return WebDriverWait(driver, timeout, poll_frequency=0.2).until(lambda d: predicate(d))
    except Exception as e:  # selenium's TimeoutException: say what was awaited
        raise AssertionError(f"timed out waiting for {what}: {e!r}\npage text:\n{driver.find_element(By.TAG_NAME, 'body').text}")


def screenshot_dir() -> Path:
    d = Path(os.environ.get("AGENTD_SCREENSHOTS") or tempfile.mkdtemp(prefix="agentd-web-"))
    d.mkdir(parents=True, exist_ok=True)
    return d


def test_the_page_chats_and_drives_an_agent_session(page_server, workspace):
    driver = browser()
    shots = screenshot_dir()
    try:
        driver.get(page_server.root + "/")
        assert driver.title == "agentd"
        # The server needs a key: the page asks for it before calling the API.
        wait(driver, "the key dialog", lambda d: d.find_element(By.ID, "key-dialog").get_attribute("open"))
        driver.find_element(By.ID, "key-input").send_keys(API_KEY)
        driver.find_element(By.ID, "key-save").click()
        wait(driver, "the model list", lambda d: "ready" in d.find_element(By.ID, "status").text)
        model = driver.find_element(By.ID, "chat-model").get_attribute("value")
        assert model.startswith("qwen2.5-coder"), model

        # Chat: the reply streams in; usage and speed are shown.
        driver.find_element(By.ID, "chat-max-tokens").clear()
        driver.find_element(By.ID, "chat-max-tokens").send_keys("48")
        driver.find_element(By.ID, "chat-input").send_keys("Write a Python function that adds two numbers.")
        driver.find_element(By.ID, "chat-send").click()
        wait(driver, "streamed text", lambda d: any(
            e.text.strip() for e in d.find_elements(By.CSS_SELECTOR, "#chat-log .msg.assistant")))
        wait(driver, "the usage line", lambda d: "tokens/s" in d.find_element(By.ID, "chat-stats").text)
        stats = driver.find_element(By.ID, "chat-stats").text
        assert "completion tokens" in stats, stats
        driver.save_screenshot(str(shots / "chat-1280x800.png"))

        # Agent: a session on the workspace (read-only tools) runs a real read.
        driver.find_element(By.ID, "tab-agent").click()
        driver.find_element(By.ID, "agent-workspace").send_keys(workspace)
        driver.find_element(By.ID, "agent-temperature").send_keys("0")
        driver.find_element(By.CSS_SELECTOR, "#agent-create button[type=submit]").click()
        wait(driver, "the session", lambda d: "session " in d.find_element(By.ID, "agent-title").text)
        driver.find_element(By.ID, "agent-input").send_keys(
            "Use the read tool to read notes.txt, then tell me the secret word.")
        driver.find_element(By.ID, "agent-send").click()
        wait(driver, "a finished read", lambda d: any(
            "read" in e.text and ("✓" in e.text or "✗" in e.text)
            for e in d.find_elements(By.CSS_SELECTOR, "#agent-log details.tool")), timeout=240)
        # The small model may go on for a while after the read: Abort ends the run (and is tested by it).
        if driver.find_element(By.ID, "agent-send").text != "Send":
            driver.find_element(By.ID, "agent-abort").click()
        wait(driver, "the run's end", lambda d: d.find_element(By.ID, "agent-send").text == "Send", timeout=60)
        tool = driver.find_element(By.CSS_SELECTOR, "#agent-log details.tool")
        tool.find_element(By.TAG_NAME, "summary").click()  # expand it: the result is the file's text
        assert "PAPAYA" in tool.text, tool.text
        wait(driver, "the tree", lambda d: "tool_result" in d.find_element(By.ID, "agent-tree").text)
        wait(driver, "the session list", lambda d: "open" in d.find_element(By.ID, "agent-sessions").text)
        driver.save_screenshot(str(shots / "agent-1280x800.png"))

        # A narrow screen: nothing overflows sideways.
        driver.set_window_size(400, 800)
        time.sleep(0.3)
        overflow = driver.execute_script(
            "return document.documentElement.scrollWidth - document.documentElement.clientWidth")
        assert overflow <= 1, f"the page is {overflow}px wider than a narrow window"
        driver.save_screenshot(str(shots / "agent-400x800.png"))
        print(f"screenshots: {shots}")

        errors = console_errors(driver)
        assert not errors, f"console errors: {errors}"
    finally:
        driver.quit()


def test_the_page_is_one_self_contained_response(page_server):
    import urllib.request

    with urllib.request.urlopen(page_server.root + "/") as res:
        body = res.read().decode()
        csp = res.headers["Content-Security-Policy"]
        assert res.headers["Content-Type"].startswith("text/html")
    assert len(body) < 200 * 1024
    assert "http://" not in body and "https://" not in body
    assert "default-src 'none'" in csp and "connect-src 'self'" in csp and "'unsafe-inline'" not in csp
