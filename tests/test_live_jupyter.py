"""The notebooks in a live JupyterLab, used as a reader of the README would: start `jupyter lab` (the README's
`make lab`) on 127.0.0.1 with a token and the project's kernel; then, for one page of each part, open it in headless
Chromium, run all its cells at `smoke`, move its first slider, and check that the figure changed and that no cell
shows an error.

The server's state (runtime files, workspaces, settings) and the smoke runs' records and run cache go to a
temporary folder. Under `make test` that folder starts with a copy of the smoke records nbval's kernels stored
(`nbval_run`; this file is one of conftest.py's `BOOK_FILES`, run after every notebook): the cells then read them
(`load_or_run`), as on a reader's second visit, and what is computed live is the kernel, the widgets and each
slider's redraw. Alone (`pytest tests/test_live_jupyter.py`), the cells compute them. Chromium is the system's
(`make browser`), driven by playwright; the network beyond 127.0.0.1 is cut off.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from gradalign.environment import project_root

NOTEBOOKS = (  # one page of each part, with its first slider
    "notebooks/lga/01_linear_regression.ipynb",  # Figure 1's coordinates: λ_ℓ (a log slider), λ_u, n_u
    "notebooks/metagrad/01_theory.ipynb",  # the first-order approximation's error against α and c
    "notebooks/sgr/01_theory.ipynb",  # Proposition 3.5's outcome against η‖x0‖² and λ
    "notebooks/isoloss/02_toy_dynamics.ipynb",  # the toy dynamics: α, learning rate, σ, steps
)
START_S, RUN_S = 60, 240


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory, nbval_run):
    """A running JupyterLab: (base URL, token). Stopped (its process group) when the module ends."""
    jupyter = Path(sys.executable).with_name("jupyter")
    if not (jupyter.exists() and shutil.which("jupyter-lab", path=str(jupyter.parent))):
        pytest.fail("JupyterLab is not installed in this environment (make setup installs requirements.txt)")
    tmp = tmp_path_factory.mktemp("lab")
    port, token = free_port(), secrets.token_hex(16)
    env = {
        **os.environ,
        "GRADALIGN_PRESET": "smoke",
        "GRADALIGN_THREADS": "1",
        "GRADALIGN_PROGRESS": "0",
        "GRADALIGN_RESULTS": str(tmp / "results"),
        "GRADALIGN_CACHE": str(tmp / "cache"),
        "JUPYTER_RUNTIME_DIR": str(tmp / "runtime"),
        "JUPYTER_CONFIG_DIR": str(tmp / "config"),
        "JUPYTERLAB_SETTINGS_DIR": str(tmp / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(tmp / "workspaces"),
    }
    # every cell drawn, in view or not (JupyterLab draws only those near the view by default)
    settings = tmp / "settings" / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings"
    settings.parent.mkdir(parents=True)
    settings.write_text('{"windowingMode": "none"}')
    # the server's root is a copy of the notebooks, never the checkout: Lab saves what it runs, and the repository's
    # notebooks keep no outputs (autosave is off as well)
    for notebook in NOTEBOOKS:
        (tmp / "root" / notebook).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(project_root() / notebook, tmp / "root" / notebook)
    if nbval_run is not None and (nbval_run["dir"] / "results").is_dir():  # the smoke records nbval's kernels stored
        shutil.copytree(nbval_run["dir"] / "results", tmp / "results")
    autosave = tmp / "settings" / "@jupyterlab" / "docmanager-extension" / "plugin.jupyterlab-settings"
    autosave.parent.mkdir(parents=True)
    autosave.write_text('{"autosave": false}')
    env.pop("GRADALIGN_BATCH", None)  # a live session builds its widgets
    log = (tmp / "lab.log").open("w")
    server = subprocess.Popen(
        [
            str(jupyter),
            "lab",
            "--no-browser",
            "--ip=127.0.0.1",
            f"--port={port}",
            f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={tmp / 'root'}",
            "--LabApp.expose_app_in_browser=True",  # window.jupyterapp: run all cells through Lab's own command
            "--LabApp.news_url=",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            *(["--allow-root"] if os.geteuid() == 0 else []),  # CI containers run as root
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_S
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"jupyter lab did not start: {(tmp / 'lab.log').read_text()[-3000:]}")
            time.sleep(0.5)
        yield base, token
    finally:
        if server.poll() is None:
            os.killpg(server.pid, 15)
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, 9)
        log.close()


@pytest.fixture(scope="module")
def chromium():
    from playwright.sync_api import sync_playwright

    path = shutil.which("chromium") or shutil.which("chromium-browser")
    assert path, "chromium not installed (make browser installs it)"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=path, args=["--headless", "--no-sandbox", "--disable-gpu"])
        yield browser
        browser.close()


FIGURE = """() => {  // the images of the slider's own interact box (not any widget output on the page)
  const slider = jupyterapp.shell.currentWidget.node.querySelector('.widget-slider');
  const box = slider && slider.closest('.widget-interact');
  return box ? [...box.querySelectorAll('img')].map(i => i.src).join(' ') : '';
}"""
STATE = """() => {  // from the notebook's model (cells out of view may not be drawn) and its kernel
  const panel = jupyterapp.shell.currentWidget, cells = [...panel.content.model.cells].filter(c => c.type === 'code');
  const outputs = cells.flatMap(c => c.outputs.toJSON());
  const kernel = panel.sessionContext.session.kernel;
  // what the slider's callback prints goes to its interact box's Output widget, not to the cell's outputs
  const slider = panel.node.querySelector('.widget-slider'), box = slider && slider.closest('.widget-interact');
  const stderr = '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]';
  const boxed = box ? [...box.querySelectorAll(stderr)]
    .map(e => e.innerText).filter(t => /Traceback|Error/.test(t)).map(t => t.slice(0, 300)) : [];
  return {
    code: cells.length,
    ran: cells.filter(c => c.executionCount !== null).length,
    busy: kernel.status !== 'idle',
    errors: outputs.filter(o => o.output_type === 'error' || (o.output_type === 'stream' && o.name === 'stderr'
      && /Traceback|Error/.test(o.text))).map(o => (o.ename ? `${o.ename}: ${o.evalue}` : o.text).slice(0, 300))
      .concat(boxed),
    sliders: panel.node.querySelectorAll('.widget-slider').length,
  };
}"""


KERNEL_READY = """() => {
  const w = jupyterapp.shell.currentWidget, s = w && w.sessionContext && w.sessionContext.session;
  const k = s && s.kernel;
  return k && k.connectionStatus === 'connected' && k.status === 'idle';
}"""


def shut_down_kernels(base: str, token: str) -> None:
    """Every kernel the server runs, shut down (a page's kernel would otherwise idle beside the next one's)."""
    import json

    with urllib.request.urlopen(f"{base}/api/kernels?token={token}", timeout=10) as r:
        kernels = json.load(r)
    for kernel in kernels:
        request = urllib.request.Request(f"{base}/api/kernels/{kernel['id']}?token={token}", method="DELETE")
        urllib.request.urlopen(request, timeout=30).close()


@pytest.fixture(scope="module")
def lab_page(lab, chromium):
    """One JupyterLab page for the module's notebooks (Lab boots once; each test opens its notebook in it)."""
    base, token = lab
    context = chromium.new_context(viewport={"width": 1400, "height": 1000})
    context.route(
        "**/*",
        lambda route: (
            route.continue_() if route.request.url.startswith(("http://127.0.0.1", "data:")) else route.abort()
        ),
    )
    page = context.new_page()
    page.goto(f"{base}/lab?token={token}&reset", wait_until="load")
    page.wait_for_function("window.jupyterapp && jupyterapp.commands.hasCommand('docmanager:open')", timeout=60_000)
    page.evaluate("() => jupyterapp.restored.then(() => true)")  # the workspace restored (a Launcher opened): then open
    yield page
    context.close()


OPEN = """async (path) => {  // opened and made the current widget (not a Launcher the restore opened); OPENED waits
  const w = await jupyterapp.commands.execute('docmanager:open', {path});  // for it to load (polled: awaiting
  jupyterapp.shell.activateById(w.id);  // context.ready here once failed, "Resulting promise was garbage collected")
  return true;
}"""
OPENED = """(path) => { const w = jupyterapp.shell.currentWidget;
  return w && w.context && w.context.path === path && w.context.isReady
    && w.node.querySelector('.jp-Cell'); }"""


def settled(page, quiet_s: float = 1.0, timeout_s: float = 60.0) -> dict:
    """STATE once the kernel is idle and the slider's interact box has not changed for `quiet_s`: its Output
    widget receives what the callback prints after the figure (an error) a little after the figure itself."""
    box = """() => { const s = jupyterapp.shell.currentWidget.node.querySelector('.widget-slider');
      const b = s && s.closest('.widget-interact'); return b ? b.innerText + b.querySelectorAll('img').length : ''; }"""
    deadline, last, since = time.monotonic() + timeout_s, None, time.monotonic()
    while time.monotonic() < deadline:
        state, now = page.evaluate(STATE), page.evaluate(box)
        if state["busy"] or now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return state
        page.wait_for_timeout(200)
    pytest.fail(f"the slider's output did not settle in {timeout_s:.0f} s")


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_a_notebook_runs_in_jupyterlab_and_its_slider_redraws_the_figure(lab, lab_page, notebook):
    base, token = lab
    committed = (project_root() / notebook).read_bytes()
    page = lab_page
    try:
        page.evaluate(OPEN, notebook)
        page.wait_for_function(OPENED, arg=notebook, timeout=60_000)
        page.wait_for_function(KERNEL_READY, timeout=60_000)
        page.evaluate("() => jupyterapp.commands.execute('notebook:run-all-cells')")
        deadline = time.monotonic() + RUN_S
        state = page.evaluate(STATE)
        while time.monotonic() < deadline and (state["busy"] or state["ran"] < state["code"]) and not state["errors"]:
            page.wait_for_timeout(500)
            state = page.evaluate(STATE)
        assert not state["errors"], f"cells show errors: {state['errors'][:3]}"
        assert state["ran"] == state["code"], f"{state['ran']} of {state['code']} cells ran in {RUN_S} s"
        assert state["sliders"] >= 1, "no slider in the notebook's live output"
        page.wait_for_function(f"({FIGURE})().length > 0", timeout=60_000)
        before = page.evaluate(FIGURE)

        handle = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .widget-slider .noUi-handle").first
        handle.scroll_into_view_if_needed()
        handle.focus()
        page.keyboard.press("PageUp")  # five steps in one change: one redraw (four arrow presses redrew four times)
        page.wait_for_function(
            f"(before) => {{ const now = ({FIGURE})(); return now && now !== before; }}", arg=before, timeout=60_000
        )
        state = settled(page)  # the callback's output complete: an error printed after its figure is seen too
        assert not state["errors"], f"moving the slider shows errors: {state['errors'][:3]}"
    finally:  # the notebook closed unsaved (disposed: no dialog), its kernel shut down: the next test sees only its own
        with contextlib.suppress(Exception):  # a failure here must not hide the test's own
            page.evaluate("() => { const w = jupyterapp.shell.currentWidget; if (w && w.context) w.dispose(); }")
            shut_down_kernels(base, token)
    assert (project_root() / notebook).read_bytes() == committed, "the live session wrote into the checkout"
