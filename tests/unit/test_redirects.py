"""The redirect rule of the registry client (oci/redirects.py), with names no test can reach: what goes to
another origin, and the downgrade from https to plain http that loopback alone may take."""

from __future__ import annotations

import pytest

from buildkit.oci.redirects import MAX_REDIRECTS, Hop, next_hop, origin


def hop(method="GET", url="https://registry.example/v2/x/blobs/sha256:1", location="", status=307,
        secret_body=False, hops=0):
    return next_hop(method, url, location, status, secret_body=secret_body, hops=hops)


def test_origin_spells_the_port_out():
    assert origin("https://r.example/v2/") == origin("https://R.example:443/x") == ("https", "r.example", 443)
    assert origin("http://r.example:80/") == ("http", "r.example", 80)
    assert origin("ftp://r.example/") is None and origin("https://r.example:99999/") is None


def test_https_to_plain_http_is_refused_unless_the_target_is_loopback():
    refused = hop(location="http://storage.example/blob")
    assert isinstance(refused, str) and "plain http" in refused
    assert isinstance(hop(location="http://127.0.0.1:5000/blob"), Hop)
    assert isinstance(hop(location="http://localhost/blob"), Hop)


def test_another_origin_gets_no_credentials_and_a_secret_body_goes_nowhere():
    out = hop(location="https://storage.example/blob?sig=1")
    assert isinstance(out, Hop) and not out.same_origin and out.url == "https://storage.example/blob?sig=1"
    kwargs = out.carry({"auth": ("u", "p"), "headers": {"Authorization": "Bearer t", "Accept": "x"},
                        "params": [("scope", "s")], "data": b"blob"})
    assert kwargs == {"headers": {"Accept": "x"}, "data": b"blob"}
    for status in (307, 308):
        refused = hop("POST", "https://auth.example/token", "https://elsewhere.example/token", status,
                      secret_body=True)
        assert isinstance(refused, str) and "not followed" in refused
    moved = hop("POST", "https://auth.example/token", "https://elsewhere.example/token", 302, secret_body=True)
    assert isinstance(moved, Hop) and moved.method == "GET" and "data" not in moved.carry({"data": {"k": "v"}})


def test_the_same_origin_keeps_everything_but_the_query():
    out = hop("POST", "https://auth.example/token", "/token/v2", 308, secret_body=True)
    assert isinstance(out, Hop) and out.same_origin and out.method == "POST"
    assert out.carry({"auth": ("u", "p"), "data": {"k": "v"}, "params": [("a", "b")]}) == \
        {"auth": ("u", "p"), "data": {"k": "v"}}


@pytest.mark.parametrize("status,method,becomes", [(301, "POST", "GET"), (302, "POST", "GET"), (303, "PUT", "GET"),
                                                   (303, "HEAD", "HEAD"), (301, "GET", "GET"), (307, "PUT", "PUT")])
def test_methods_change_as_http_says(status, method, becomes):
    out = hop(method, location="/elsewhere", status=status)
    assert isinstance(out, Hop) and out.method == becomes and out.keep_body == (becomes == method)


def test_not_an_http_url_and_too_many_hops_are_refused():
    assert "not an http or https URL" in str(hop(location="file:///etc/passwd"))
    assert "redirects" in str(hop(location="/x", hops=MAX_REDIRECTS))
