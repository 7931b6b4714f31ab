"""The examples in examples/ run here: scripts as real subprocesses, the
FastAPI app through its TestClient, on every backend where they take a URL."""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import subprocess
import sys
import warnings
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import sqlalchemy as sa

from sqlalchemy_ulid import ULID

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def run(script: Path, *args: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        [sys.executable, str(script), *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def url_of(backend: Any) -> str:
    return str(backend.engine.url.render_as_string(hide_password=False))


def test_quickstart_demo(tmp_path: Path) -> None:
    out = run(EXAMPLES / "quickstart.py", cwd=tmp_path)
    assert (tmp_path / "quickstart.sqlite3").exists()
    assert "ORDER BY id returns them in creation order: yes" in out
    assert "timestamp   1712345678901 ms = 2024-04-05T19:34:38.901000+00:00" in out
    assert "invalid character 'U' at position 25" in out
    assert "page 5:  5 events, n 100..104 next cursor None" in out
    assert "20 events since" in out
    assert "plan: SEARCH events USING INDEX" in out  # the primary key serves the range
    # Run twice: the database is recreated, not appended to.
    assert "inserted 105 events" in run(EXAMPLES / "quickstart.py", cwd=tmp_path)


def test_event_log(backend: Any, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/log.sqlite3" if backend.name == "sqlite" else url_of(backend)
    try:
        out = run(EXAMPLES / "event_log.py", url, cwd=tmp_path)
    finally:
        with backend.engine.begin() as conn:
            conn.execute(sa.text("DROP TABLE IF EXISTS event_log"))
    assert "read 600 events in id order, 600 distinct ids" in out
    assert out.count("in write order: yes") == 12
    assert "OK: no duplicates, every writer in order" in out
    assert "600 events, 0 missed, 0 duplicates, in id order: yes" in out


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


# A third-party limit, not ours: sqlmodel imports sqlalchemy.sql.elements.TryCast,
# which SQLAlchemy added in 2.0.14 (older sqlmodel releases still install on
# older SQLAlchemy, then fail to import).
@pytest.mark.skipif(
    _version(sa.__version__) < (2, 0, 14), reason="sqlmodel needs SQLAlchemy >= 2.0.14"
)
def test_sqlmodel_example(backend: Any, tmp_path: Path) -> None:
    out = run(EXAMPLES / "sqlmodel_example.py", url_of(backend), cwd=tmp_path)
    assert "Deadpond, Rusty-Man" in out
    assert '"id":"' in out


# -- the FastAPI app ------------------------------------------------------------


def assert_tour_output(out: str) -> None:
    assert "['button 0', 'button 1', 'button 2']" in out
    assert "['button 6']" in out
    assert "GET /events?after=01HTQW311N1KR5G0Y75M3EF00U -> 400" in out
    assert "GET /events/01HTQW311N1KR5G0Y75M3EF00H -> 404" in out
    assert "POST /events -> 422" in out


def test_fastapi_tour_runs(tmp_path: Path) -> None:
    assert_tour_output(run(EXAMPLES / "fastapi_app" / "app.py", cwd=tmp_path))


#: What docs/fastapi.md tells a reader to install for the tutorial, besides
#: sqlalchemy-ulid itself; uvicorn only serves, the tour does not import it.
TUTORIAL_PACKAGES = ["fastapi", "httpx", "uvicorn"]
# The modules the example may import: the standard library, and what those
# packages (and sqlalchemy-ulid) install. fastapi brings pydantic and starlette.
TUTORIAL_MODULES = {"sqlalchemy", "sqlalchemy_ulid", "fastapi", "pydantic", "starlette"}


def test_tutorial_lists_exactly_what_the_example_installs() -> None:
    page = (ROOT / "docs" / "fastapi.md").read_text()
    assert f"pip install sqlalchemy-ulid {' '.join(TUTORIAL_PACKAGES)}" in page
    tree = ast.parse((EXAMPLES / "fastapi_app" / "app.py").read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            imported.add(node.module.split(".")[0])
    third_party = imported - set(sys.stdlib_module_names)
    assert third_party <= TUTORIAL_MODULES, third_party - TUTORIAL_MODULES
    assert "fastapi" in third_party  # the walk saw the imports at all


def _requirement_closure(names: list[str]) -> set[str]:
    """The installed distributions ``names`` need, their dependencies included."""
    from importlib import metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        for text in metadata.requires(name) or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return seen


def test_the_tour_runs_with_only_the_listed_packages(tmp_path: Path) -> None:
    """The tour in an environment of fastapi, httpx, SQLAlchemy and their deps alone.

    A fresh venv and pip would take a minute and the network; this links the
    already installed distributions into an empty directory instead and runs
    the tour with site-packages switched off (-S), so an import the docs do
    not list fails here.
    """
    from importlib import metadata

    site = tmp_path / "site"
    site.mkdir()
    wanted = _requirement_closure(["sqlalchemy", *TUTORIAL_PACKAGES[:2]])
    for dist in metadata.distributions():
        name = dist.metadata["Name"].lower().replace("_", "-").replace(".", "-")
        if name not in wanted or not dist.files:
            continue
        for top in {file.parts[0] for file in dist.files if file.parts[0] != ".."}:
            source = Path(str(dist.locate_file(top)))
            if source.exists() and not top.endswith(".pth") and not (site / top).exists():
                (site / top).symlink_to(source)
    env = {
        "PYTHONPATH": os.pathsep.join([str(site), str(ROOT / "src")]),
        "PATH": os.environ.get("PATH", ""),
        "PYTHONNOUSERSITE": "1",
    }
    result = subprocess.run(
        [sys.executable, "-S", str(EXAMPLES / "fastapi_app" / "app.py")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert_tour_output(result.stdout)
    # The environment really is bare: pytest, alembic and hypothesis are absent.
    probe = subprocess.run(
        [sys.executable, "-S", "-c", "import alembic"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert probe.returncode != 0


def assert_problem(response: Any, status: int) -> None:
    """The one error shape of the example API: RFC 9457 problem details."""
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert set(body) == {"type", "title", "status", "detail", "errors"}
    assert body["status"] == status
    assert body["type"] == "about:blank"


def _load_app_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("events_app", EXAMPLES / "fastapi_app" / "app.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["events_app"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def api(backend: Any) -> Iterator[tuple[Any, list[str]]]:
    module = _load_app_module()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Starlette's TestClient: httpx deprecation
        from fastapi.testclient import TestClient
    app = module.create_app(url_of(backend))
    engine: sa.Engine = app.state.engine
    statements: list[str] = []
    sa.event.listen(engine, "before_cursor_execute", lambda *args: statements.append(args[2]))
    try:
        with TestClient(app) as client:
            yield client, statements
    finally:
        module.Base.metadata.drop_all(engine)
        engine.dispose()


def _walk(client: Any, url: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    while url:
        response = client.get(url)
        assert response.status_code == 200, response.text
        body = response.json()
        items += body["items"]
        url = body["next"]
    return items


def test_api_pages_through_everything_once(api: tuple[Any, list[str]]) -> None:
    client, _ = api
    created = [
        client.post("/events", json={"kind": "k", "detail": str(n)}).json() for n in range(11)
    ]
    for limit in (1, 3, 11, 12):
        items = _walk(client, f"/events?limit={limit}")
        assert [item["detail"] for item in items] == [str(n) for n in range(11)]
    first_page = client.get("/events?limit=4").json()
    assert first_page["next"].endswith(f"after={created[3]['id']}")
    # Rows added between pages appear at the end, nothing is skipped or repeated.
    client.post("/events", json={"kind": "k", "detail": "late"})
    rest = _walk(client, first_page["next"])
    assert [item["detail"] for item in rest] == [*(str(n) for n in range(4, 11)), "late"]
    one = client.get(f"/events/{created[5]['id'].lower()}")
    assert one.status_code == 200
    assert one.json()["detail"] == "5"
    assert one.json()["created_at"].startswith(str(ULID(created[5]["id"]).datetime.date()))


def test_api_created_since(api: tuple[Any, list[str]]) -> None:
    client, _ = api
    old = client.post("/events", json={"kind": "k", "detail": "old"}).json()
    cutoff = ULID(old["id"]).datetime + timedelta(milliseconds=1)
    while datetime.now(timezone.utc) < cutoff:
        pass
    client.post("/events", json={"kind": "k", "detail": "new"})
    since = client.get("/events", params={"since": cutoff.isoformat()})
    assert [item["detail"] for item in since.json()["items"]] == ["new"]
    naive = client.get("/events", params={"since": "2024-01-01T00:00:00"})
    assert naive.status_code == 400


@pytest.mark.parametrize(
    "since",
    [
        "1969-12-31T23:59:59Z",  # one second before the first ULID millisecond
        "0001-01-01T00:00:00Z",  # year 1
        "-1",  # epoch seconds, before 1970
    ],
)
def test_api_since_before_1970_is_a_400(api: tuple[Any, list[str]], since: str) -> None:
    client, statements = api
    statements.clear()
    response = client.get("/events", params={"since": since})
    assert response.status_code == 400, response.text
    assert response.json()["errors"][0]["field"] == "since"
    detail = response.json()["detail"]
    assert detail.startswith("since: ")
    # pydantic before 2.1 reads "-1" as a naive time, which the app refuses too.
    assert "outside 0 .. 2**48 - 1" in detail or (since == "-1" and "timezone" in detail)
    selects = [s for s in statements if s.lstrip().upper().startswith("SELECT")]
    assert not any("api_events" in s for s in selects)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("/events?after=01HTQW311N1KR5G0Y75M3EF00U", "after: invalid character 'U' at position 25"),
        ("/events?after=", "after: a ULID is 26 characters, got 0"),  # empty is malformed
        ("/events?after=' OR 1=1 --", "after: a ULID is 26 characters, got 11"),
        ("/events/81HTQW311N1KR5G0Y75M3EF00H", "event_id: first character must be 0-7"),
        ("/events/not-a-ulid", "event_id: a ULID is 26 characters, got 10"),
    ],
)
def test_api_rejects_malformed_ids_before_sql(
    api: tuple[Any, list[str]], url: str, message: str
) -> None:
    client, statements = api
    statements.clear()
    response = client.get(url)
    assert response.status_code == 400
    assert_problem(response, 400)
    assert response.json()["detail"].startswith(message)
    field, _, text = message.partition(": ")
    assert response.json()["errors"][0]["field"] == field
    assert response.json()["errors"][0]["message"].startswith(text)
    assert statements == []


def test_api_unknown_id_is_404(api: tuple[Any, list[str]]) -> None:
    client, _ = api
    response = client.get("/events/01HTQW311N1KR5G0Y75M3EF00H")
    assert response.status_code == 404
    assert_problem(response, 404)
    assert response.json()["detail"] == "no event 01HTQW311N1KR5G0Y75M3EF00H"
    assert response.json()["errors"] == []


@pytest.mark.parametrize(
    ("method", "url", "body", "status"),
    [
        ("GET", "/events?limit=0", None, 400),  # a query parameter out of range
        ("GET", "/nowhere", None, 404),  # an unknown route
        ("POST", "/events", {"kind": ""}, 422),  # the body fails the schema
        ("POST", "/events", {"detail": "no kind"}, 422),  # a field is missing
    ],
)
def test_api_errors_have_one_shape(
    api: tuple[Any, list[str]], method: str, url: str, body: Any, status: int
) -> None:
    client, _ = api
    response = client.request(method, url, json=body)
    assert response.status_code == status, response.text
    assert_problem(response, status)
    if status != 404:
        assert response.json()["errors"], response.text
        assert response.json()["detail"].startswith(response.json()["errors"][0]["field"])


# -- the Strawberry and Litestar + advanced-alchemy apps ---------------------------


def test_strawberry_app(backend: Any, tmp_path: Path) -> None:
    pytest.importorskip("strawberry")
    out = run(EXAMPLES / "strawberry_app" / "app.py", url_of(backend), cwd=tmp_path)
    assert "7 books; this page: Book 3 (5), Book 1 (5), Book 5 (4)" in out
    assert "7 books; this page: Book 4 (2)" in out
    assert "a bad cursor: after: a ULID is 26 characters, got 12" in out


def test_litestar_aa_app(backend: Any, tmp_path: Path) -> None:
    pytest.importorskip("advanced_alchemy")
    pytest.importorskip("litestar")
    out = run(EXAMPLES / "litestar_aa_app" / "app.py", url_of(backend), cwd=tmp_path)
    assert "7 tickets; this page: Ticket 3 (p3), Ticket 1 (p3), Ticket 5 (p2)" in out
    assert "7 tickets; this page: Ticket 0 (p1)" in out
    assert "a bad cursor: 400 a ULID is 26 characters, got 8" in out
