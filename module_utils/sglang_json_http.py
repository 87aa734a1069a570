# -*- coding: utf-8 -*-
# Copyright: (c) 2026, eagle-deploy contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""One JSON request over HTTP(S) and its answer, for the modules that talk to a router or a server's API
(sglang_router_worker, wait_for_drain). Module side only.

An answer of any status comes back as ``Answer(status, body)`` (the body parsed as JSON where it is JSON, else its
text); only a request that got no answer at all (refused, timed out, TLS) raises ``Unreachable``. The bearer token
goes into the ``Authorization`` header and nowhere else: no message of this file shows a header.
"""

from __future__ import annotations

import json
from collections import namedtuple
from http.client import HTTPException
from urllib.error import HTTPError, URLError

from ansible.module_utils.urls import open_url

Answer = namedtuple("Answer", "status body")


class Unreachable(Exception):
    """No HTTP answer at all: the message says which URL and why (never a header)."""


def _body(raw):
    text = raw.decode("utf-8", "replace") if raw else ""
    try:
        return json.loads(text) if text else None
    except ValueError:
        return text


class JsonHttp(object):
    """JSON requests to one base URL. ``opener`` (open_url's signature) is injectable for tests."""

    def __init__(self, base_url, token=None, timeout=10.0, validate_certs=True, opener=None):
        self.base_url = base_url.rstrip("/")
        self.headers = {"Accept": "application/json"}
        if token:
            self.headers["Authorization"] = "Bearer " + token
        self.timeout = timeout
        self.validate_certs = validate_certs
        self.opener = opener or open_url

    def url(self, path):
        return self.base_url + path

    def call(self, method, path, body=None):
        """Answer(status, parsed body) of ``method path``; raises Unreachable when no answer came."""
        headers = dict(self.headers)
        data = None
        if body is not None:
            data = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        try:
            resp = self.opener(self.url(path), data=data, headers=headers, method=method, timeout=self.timeout,
                               validate_certs=self.validate_certs, follow_redirects="none")
            try:
                return Answer(resp.getcode(), _body(resp.read()))
            finally:
                resp.close()
        except HTTPError as exc:
            try:
                raw = exc.read()
            except (AttributeError, OSError):
                raw = b""
            return Answer(exc.code, _body(raw))
        except (URLError, HTTPException, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", None) or exc
            raise Unreachable("%s %s: no answer (%s)" % (method, self.url(path), reason))
