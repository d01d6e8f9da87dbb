"""The broker script's port picker: every port it hands out in one process is distinct."""

from __future__ import annotations

import socket

import kafka_local  # scripts/, on sys.path from conftest


def test_free_port_never_hands_the_same_port_out_twice_even_when_the_kernel_offers_it_again() -> None:
    # A node's client and controller listeners are picked back to back; CI once got one
    # port for both (the kernel reused a just-closed ephemeral port) and the broker refused
    # to format. 500 picks in a row must all differ and each must be bindable.
    ports = [kafka_local.free_port() for _ in range(500)]
    assert len(set(ports)) == len(ports)
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports[-1]))
