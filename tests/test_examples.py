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
    assert "['button 5', 'button 3', 'button 1']" in out  # by kind, newest first
    assert "['button 6', 'button 4', 'button 2']" in out
    assert "'code': 'cursor_sort_mismatch'" in out  # a bare id on the two-key sort
    assert "GET /events?limit=0 -> 400" in out
    assert "GET /events?after=not%20a%20cursor -> 422" in out
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


def assert_problem(response: Any, code: str, field: str | None) -> dict[str, Any]:
    """The library's 400: an RFC 9457 problem document naming the parameter."""
    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert set(body) == {"type", "title", "status", "detail", "code", "errors"}
    assert (body["type"], body["title"], body["status"]) == ("about:blank", "Bad Request", 400)
    assert body["code"] == code, body
    assert [error["field"] for error in body["errors"]] == ([field] if field else []), body
    assert body["detail"].startswith(f"{field}: " if field else ""), body
    return body


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
        # raise_server_exceptions=False: an unhandled error is a 500 here, as
        # a client would see it, not an exception in the test.
        with TestClient(app, raise_server_exceptions=False) as client:
            yield client, statements
    finally:
        module.Base.metadata.drop_all(engine)
        engine.dispose()


def _walk(client: Any, url: str, **params: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    cursor = None
    while True:
        query = {**params, **({"after": cursor} if cursor else {})}
        response = client.get(url, params=query)
        assert response.status_code == 200, response.text
        body = response.json()
        assert set(body) == {"items", "next_cursor", "prev_cursor"}
        items += body["items"]
        cursor = body["next_cursor"]
        if cursor is None:
            return items


def test_api_pages_through_everything_once(api: tuple[Any, list[str]]) -> None:
    client, _ = api
    created = [
        client.post("/events", json={"kind": "k", "detail": str(n)}).json() for n in range(11)
    ]
    for limit in (1, 3, 11, 12):
        items = _walk(client, "/events", limit=limit)
        assert [item["detail"] for item in items] == [str(n) for n in range(11)]
    first_page = client.get("/events", params={"limit": 4}).json()
    assert first_page["next_cursor"] == created[3]["id"]  # the id order: a bare id
    # Rows added between pages appear at the end, nothing is skipped or repeated.
    client.post("/events", json={"kind": "k", "detail": "late"})
    rest = _walk(client, "/events")[4:]
    assert [item["detail"] for item in rest] == [*(str(n) for n in range(4, 11)), "late"]
    back = client.get("/events", params={"before": created[4]["id"], "limit": 2}).json()
    assert [item["detail"] for item in back["items"]] == ["2", "3"]
    one = client.get(f"/events/{created[5]['id'].lower()}")
    assert one.status_code == 200
    assert one.json()["detail"] == "5"
    assert one.json()["created_at"].startswith(str(ULID(created[5]["id"]).datetime.date()))


def test_api_pages_a_sort_by_two_keys(api: tuple[Any, list[str]]) -> None:
    client, _ = api
    for n in range(9):
        client.post("/events", json={"kind": "abc"[n % 3], "detail": str(n)})
    expected = [str(n) for n in sorted(range(9), key=lambda n: ("abc"[n % 3], -n))]
    for limit in (1, 2, 4, 9, 10):
        items = _walk(client, "/events/by-kind", limit=limit)
        assert [item["detail"] for item in items] == expected


def test_api_created_since(api: tuple[Any, list[str]]) -> None:
    client, _ = api
    old = client.post("/events", json={"kind": "k", "detail": "old"}).json()
    cutoff = ULID(old["id"]).datetime + timedelta(milliseconds=1)
    while datetime.now(timezone.utc) < cutoff:
        pass
    client.post("/events", json={"kind": "k", "detail": "new"})
    since = client.get("/events", params={"since": cutoff.isoformat()})
    assert [item["detail"] for item in since.json()["items"]] == ["new"]


def _abuse(client: Any) -> dict[str, tuple[str, dict[str, str]]]:
    """Each bad request the two list endpoints must refuse: (path, query)."""
    for n in range(7):
        client.post("/events", json={"kind": "ab"[n % 2], "detail": str(n)})
    by_id = client.get("/events", params={"limit": 2}).json()["next_cursor"]
    by_kind = client.get("/events/by-kind", params={"limit": 2}).json()["next_cursor"]
    middle = len(by_kind) // 2
    edited = by_kind[:middle] + ("A" if by_kind[middle] != "A" else "B") + by_kind[middle + 1 :]
    return {
        "garbage": ("/events", {"after": "' OR 1=1 --"}),  # not the shape of a cursor
        "garbage-by-kind": ("/events/by-kind", {"after": "%%%"}),
        "empty": ("/events", {"after": ""}),  # omit the parameter instead
        "empty-before": ("/events", {"before": ""}),
        "too-long": ("/events/by-kind", {"after": "A" * 6001}),
        "malformed-id": ("/events", {"after": "01HTQW311N1KR5G0Y75M3EF00U"}),  # 'U'
        "truncated": ("/events/by-kind", {"after": by_kind[:-5]}),
        "truncated-id": ("/events", {"after": by_id[:-1]}),
        "edited": ("/events/by-kind", {"after": edited}),
        "edited-end": ("/events/by-kind", {"after": by_kind[:-1] + "_"}),
        "bare-id": ("/events/by-kind", {"after": by_id}),  # an id on a two-key sort
        "other-sort": ("/events", {"after": by_kind}),  # a by-kind cursor on the id order
        "limit-0": ("/events", {"limit": "0"}),
        "limit-negative": ("/events", {"limit": "-1"}),
        "limit-huge": ("/events", {"limit": str(10**9)}),
        "limit-huge-by-kind": ("/events/by-kind", {"limit": str(10**9)}),
        "limit-text": ("/events", {"limit": "ten"}),
        "after-and-before": ("/events", {"after": by_id, "before": by_id}),
        "since-naive": ("/events", {"since": "2024-01-01T00:00:00"}),  # no zone
        "since-1969": ("/events", {"since": "1969-12-31T23:59:59Z"}),  # before any ULID
        "since-year-1": ("/events", {"since": "0001-01-01T00:00:00Z"}),
        "since-text": ("/events", {"since": "yesterday"}),
    }


#: What each abuse answers: 422 (FastAPI's check of the parameter's type,
#: naming it) or 400 with the library's problem code and the parameter named.
ABUSE_ANSWERS: dict[str, tuple[int, str | None, str | None]] = {
    "garbage": (422, None, "after"),
    "garbage-by-kind": (422, None, "after"),
    "empty": (422, None, "after"),
    "empty-before": (422, None, "before"),
    "too-long": (422, None, "after"),
    "malformed-id": (400, "invalid_id", "after"),
    "truncated": (400, "invalid_cursor", "after"),
    "truncated-id": (400, "invalid_id", "after"),
    "edited": (400, "invalid_cursor", "after"),
    "edited-end": (400, "invalid_cursor", "after"),
    "bare-id": (400, "cursor_sort_mismatch", "after"),
    "other-sort": (400, "cursor_sort_mismatch", "after"),
    "limit-0": (400, "invalid_limit", "limit"),
    "limit-negative": (400, "invalid_limit", "limit"),
    "limit-huge": (400, "invalid_limit", "limit"),
    "limit-huge-by-kind": (400, "invalid_limit", "limit"),
    "limit-text": (422, None, "limit"),
    "after-and-before": (400, "invalid_input", None),
    "since-naive": (400, "invalid_time", None),
    "since-1969": (400, "invalid_time", None),
    "since-year-1": (400, "invalid_time", None),
    "since-text": (422, None, "since"),
}


def test_api_abuse_is_a_4xx_with_a_clear_body_before_any_sql(
    api: tuple[Any, list[str]],
) -> None:
    client, statements = api
    requests = _abuse(client)
    assert requests.keys() == ABUSE_ANSWERS.keys()
    for name, (path, query) in requests.items():
        statements.clear()
        response = client.get(path, params=query)
        status, code, field = ABUSE_ANSWERS[name]
        assert response.status_code == status, (name, response.text)
        assert statements == [], name  # refused before any SQL
        if status == 422:
            errors = response.json()["detail"]
            assert [error["loc"] for error in errors] == [["query", field]], (name, errors)
            assert all(error["msg"] for error in errors), name
        else:
            body = assert_problem(response, code or "", field)
            assert len(body["detail"]) > len(f"{field}: ") + 10, (name, body)


def test_api_a_bare_id_on_two_keys_says_what_to_pass(api: tuple[Any, list[str]]) -> None:
    client, _ = api
    made = client.post("/events", json={"kind": "k"}).json()
    response = client.get("/events/by-kind", params={"after": made["id"]})
    body = assert_problem(response, "cursor_sort_mismatch", "after")
    assert "pass the next_cursor or prev_cursor" in body["detail"]


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("/events/81HTQW311N1KR5G0Y75M3EF00H", "first character must be 0-7"),
        ("/events/not-a-ulid", "a ULID is 26 characters, got 10"),
    ],
)
def test_api_rejects_malformed_path_ids_before_sql(
    api: tuple[Any, list[str]], url: str, message: str
) -> None:
    client, statements = api
    statements.clear()
    response = client.get(url)
    assert response.status_code == 422
    [error] = response.json()["detail"]
    assert error["loc"] == ["path", "event_id"]
    assert message in error["msg"]
    assert statements == []


def test_api_unknown_id_is_404(api: tuple[Any, list[str]]) -> None:
    client, _ = api
    response = client.get("/events/01HTQW311N1KR5G0Y75M3EF00H")
    assert response.status_code == 404
    assert response.json() == {"detail": "no event 01HTQW311N1KR5G0Y75M3EF00H"}


def test_api_bad_bodies_are_422(api: tuple[Any, list[str]]) -> None:
    client, _ = api
    for body, field in (({"kind": ""}, "kind"), ({"detail": "no kind"}, "kind")):
        response = client.post("/events", json=body)
        assert response.status_code == 422
        assert [error["loc"] for error in response.json()["detail"]] == [["body", field]]


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
