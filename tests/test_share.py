"""Sharing traces through a Hugging Face bucket. Only the remote service is faked (no Hub is
reachable here): create_bucket and sync_bucket are replaced, everything else runs for real."""

from __future__ import annotations

import pytest
from huggingface_hub import BucketUrl

from common import share
from tests.helpers import run_script

TOKEN = "hf_secretsecretsecret"


class FakeHub:
    def __init__(self):
        self.synced = []

    def create_bucket(self, bucket_id, *, exist_ok, token):
        assert exist_ok and token == TOKEN
        return BucketUrl(f"https://huggingface.co/buckets/alice/{bucket_id}")

    def sync_bucket(self, source, dest, *, delete, token, quiet):
        self.synced.append({"source": source, "dest": dest, "delete": delete})


@pytest.fixture
def hub(monkeypatch):
    fake = FakeHub()
    monkeypatch.setattr(share.hf, "create_bucket", fake.create_bucket)
    monkeypatch.setattr(share.hf, "sync_bucket", fake.sync_bucket)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    return fake


@pytest.fixture
def traces(tmp_path):
    (tmp_path / "02_linear").mkdir()
    (tmp_path / "02_linear" / "b8_bf16_eager.json").write_text("{}")
    (tmp_path / "02_linear" / "b8_bf16_eager.txt").write_text("table")
    (tmp_path / "03_simple_mlp").mkdir()
    (tmp_path / "03_simple_mlp" / "x.json.gz").write_bytes(b"\x1f\x8b")
    return tmp_path


def test_module_command_syncs_without_deleting_and_prints_perfetto_links(hub, traces, capsys):
    assert share.main([str(traces), "--bucket", "traces"]) == 0
    assert hub.synced == [
        {"source": str(traces), "dest": "hf://buckets/alice/traces", "delete": False}
    ]
    out = capsys.readouterr().out
    base = "https://ui.perfetto.dev/#!/?url=https://huggingface.co/buckets/alice/traces/resolve/"
    assert base + "02_linear/b8_bf16_eager.json" in out
    assert base + "03_simple_mlp/x.json.gz" in out
    assert ".txt" not in out  # tables are synced, but only traces get a Perfetto link
    assert TOKEN not in out


def test_delete_only_when_asked(hub, traces):
    assert share.main([str(traces), "-b", "traces", "--delete"]) == 0
    assert hub.synced[0]["delete"] is True


def test_no_token_is_one_line_and_leaves_traces_alone(traces, monkeypatch, tmp_path, capsys):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr(share.hf, "get_token", lambda: None)
    before = sorted(p.name for p in traces.rglob("*"))
    assert share.main([str(traces), "-b", "traces"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: no Hugging Face token") and len(err.splitlines()) == 1
    assert sorted(p.name for p in traces.rglob("*")) == before


def test_unreachable_hub_is_one_line_without_the_token(hub, traces, monkeypatch, capsys):
    def refuse(*args, **kwargs):
        raise ConnectionError(f"could not connect (Authorization: Bearer {TOKEN})\nmore")

    monkeypatch.setattr(share.hf, "create_bucket", refuse)
    assert share.main([str(traces), "-b", "traces"]) == 1
    err = capsys.readouterr().err
    assert "could not sync to bucket 'traces'" in err and "ConnectionError" in err
    assert TOKEN not in err and len(err.splitlines()) == 1
    assert (traces / "02_linear" / "b8_bf16_eager.json").read_text() == "{}"


def test_missing_folder_is_bad_input(hub, tmp_path, capsys):
    assert share.main([str(tmp_path / "nope"), "-b", "traces"]) == 2
    assert "no traces folder" in capsys.readouterr().err


def test_script_bucket_flag_shares_and_prints_its_own_link(hub, tmp_path, capsys):
    rc = run_script("02_linear", "--batch", "4", "--traces-dir", str(tmp_path), "--bucket", "t")
    assert rc == 0
    assert hub.synced[0]["source"] == str(tmp_path)
    out = capsys.readouterr().out
    assert "/buckets/alice/t/resolve/02_linear/b4_in32_out64_bf16_eager_cpu.json" in out
