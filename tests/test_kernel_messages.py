"""The host's ZMTP peer (`sandbox/zmtp.py`) against libzmq's own sockets, no sandbox needed: it speaks to a
ROUTER and a PUB as jupyter's client would, and charges each frame before reading its body, so a multipart
message past its budget is refused with its frames still unread on the wire."""

from __future__ import annotations

import time

import pytest
import zmq

from dareforge.sandbox.zmtp import FRAME_COST, OverBudget, Peer


@pytest.fixture
def context():
    ctx = zmq.Context()
    yield ctx
    ctx.destroy(linger=0)


def receive(peer: Peer, charge, seconds: float = 10.0):
    stop = time.monotonic() + seconds
    while time.monotonic() < stop:
        message = peer.receive(charge)
        if message is not None:
            return [bytes(frame) for frame in message]
        time.sleep(0.005)
    raise AssertionError("no message arrived")


def unlimited(_: int, __: int) -> None:
    pass


def test_a_dealer_peer_talks_to_a_router(context, tmp_path):
    router = context.socket(zmq.ROUTER)
    router.bind(f"ipc://{tmp_path}/shell")
    peer = Peer(tmp_path / "shell", b"DEALER", b"host-id")
    peer.send([b"hello", b"x" * 300])
    identity, *frames = router.recv_multipart()
    assert identity == b"host-id" and frames == [b"hello", b"x" * 300]
    router.send_multipart([identity, b"reply", b"y" * 70_000])
    assert receive(peer, unlimited) == [b"reply", b"y" * 70_000]
    peer.close()


def test_a_sub_peer_hears_a_pub_and_a_multipart_flood_is_charged_before_it_is_read(context, tmp_path):
    pub = context.socket(zmq.PUB)
    pub.bind(f"ipc://{tmp_path}/iopub")
    peer = Peer(tmp_path / "iopub", b"SUB")
    peer.send([b"\x01"])
    charged: list[int] = []

    def charge(so_far: int, cost: int) -> None:
        charged.append(cost)
        if so_far + cost > 10 * (1000 + FRAME_COST):
            raise OverBudget("past the message budget")

    stop = time.monotonic() + 10
    message = None
    while message is None and time.monotonic() < stop:  # a subscription reaches the PUB a moment later
        pub.send_multipart([b"topic", b"small"])
        time.sleep(0.01)
        message = peer.receive(charge)
    assert [bytes(f) for f in message] == [b"topic", b"small"]
    while peer.receive(charge) is not None:
        pass
    charged.clear()
    pub.send_multipart([b"x" * 1000] * 500)
    with pytest.raises(OverBudget):
        receive(peer, charge)
    assert len(charged) == 11  # ten frames read, the eleventh refused on its header
    peer.close()
