"""The crash points' hit counter: `@n` means the n-th hit, also when hits race in threads."""

from __future__ import annotations

import threading

from lakesink.protocol import crashpoints


def test_racing_hits_each_get_their_own_number(tmp_path, monkeypatch):
    monkeypatch.setenv("LAKESINK_CRASH_COUNTER", str(tmp_path / "hits"))
    barrier, chosen = threading.Barrier(8), []

    def hit():
        barrier.wait()  # all at once, as parallel rewrite tasks reach mid-rewrite
        if crashpoints._nth_hit("mid-rewrite@1", "mid-rewrite"):
            chosen.append(threading.get_ident())

    threads = [threading.Thread(target=hit) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(chosen) == 1  # exactly one hit is the first: never none, never two
    assert not crashpoints._nth_hit("mid-rewrite@9", "other-point")
    assert crashpoints._nth_hit("mid-rewrite@9", "mid-rewrite")  # the 9th hit
