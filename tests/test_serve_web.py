"""The web page of `tern serve` in a real browser: Debian's headless Chromium driven by Selenium
(chromedriver from Debian too) loads /, lists the model, translates two typed lines, then asks
for a 3-best list with scores; the text shown must be what `tern translate` prints for the same
lines and options (scores to the 4 decimals the page shows). A screenshot goes to
docs/serving-page.png when TERN_SCREENSHOT=1.
"""
import os
import shutil
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "tools"))
from serve_util import ROOT, Server, cli_translate  # noqa: E402

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium not installed (tests/requirements.txt)")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions as EC  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER),
                                reason="Debian's chromium and chromium-driver are not installed (scripts/setup.sh)")

LINES = ["A man is riding a bicycle.", "Two dogs play in the snow."]


@pytest.fixture
def browser(tmp_path):
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--window-size=1100,800", f"--user-data-dir={tmp_path / 'chrome'}"):
        opts.add_argument(a)
    drv = webdriver.Chrome(service=webdriver.ChromeService(executable_path=CHROMEDRIVER), options=opts)
    drv.set_page_load_timeout(60)
    yield drv
    drv.quit()


def test_page_translates(tmp_path, browser):
    s = Server(tmp_path)
    try:
        ref = cli_translate(LINES)
        browser.get(f"http://127.0.0.1:{s.port}/")
        wait = WebDriverWait(browser, 60)
        wait.until(lambda d: len(Select(d.find_element(By.ID, "model")).options) == 1)
        assert Select(browser.find_element(By.ID, "model")).first_selected_option.get_attribute("value") == "en-de"
        box = browser.find_element(By.ID, "input")
        box.clear()
        box.send_keys("\n".join(LINES))
        browser.find_element(By.ID, "go").click()
        wait.until(EC.text_to_be_present_in_element((By.ID, "status"), "done"))
        assert browser.find_element(By.ID, "output").text == "\n".join(ref)

        # n-best: beam 5, 3 hypotheses, with scores
        out = cli_translate(LINES, "-b", "5", "-n", "3")
        beam = browser.find_element(By.ID, "beam")
        beam.clear()
        beam.send_keys("5")
        nh = browser.find_element(By.ID, "nhyp")
        nh.clear()
        nh.send_keys("3")
        browser.find_element(By.ID, "nbest").click()
        browser.execute_script("document.getElementById('status').textContent = '';")
        browser.find_element(By.ID, "go").click()
        wait.until(EC.text_to_be_present_in_element((By.ID, "status"), "done"))
        rows = browser.find_elements(By.CSS_SELECTOR, "#nbestbox table tr")[1:]
        shown = [[c.text for c in r.find_elements(By.TAG_NAME, "td")] for r in rows]
        assert len(shown) == 6
        for k, line in enumerate(out):
            i, hyp, score = line.split(" ||| ")
            src, rank, h, sc = shown[k]
            assert int(i) == k // 3 and rank == str(k % 3 + 1) and h == hyp
            assert src == (LINES[int(i)] if k % 3 == 0 else "")
            assert abs(float(sc) - float(score)) <= 0.00005 + 1e-4
        if os.environ.get("TERN_SCREENSHOT") == "1":
            browser.save_screenshot(os.path.join(ROOT, "docs", "serving-page.png"))
    finally:
        assert s.stop() == 0, s.stderr()
