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

import errno
import json
from collections import namedtuple
from http.client import HTTPException
from urllib.error import HTTPError, URLError
from urllib.parse import unquote, urlsplit, urlunsplit

from ansible.module_utils.urls import open_url

Answer = namedtuple("Answer", "status body")

# The options every module of this file's clients has (merged into its argument spec), checked by check_options.
HTTP_OPTIONS = dict(
    request_timeout=dict(type="float", default=10),
    validate_certs=dict(type="bool", default=True),
)


def check_options(params, urls=(), positive=(), at_least_zero=()):
    """What is wrong with a module's URL and number options, or None: ``urls`` must be http(s) URLs, ``positive``
    above 0 (``request_timeout`` always), ``at_least_zero`` 0 or more."""
    for name in urls:
        if not str(params[name]).startswith(("http://", "https://")):
            return "%s must be an http:// or https:// URL, got %r" % (name, params[name])
    for name in ("request_timeout",) + tuple(positive):
        if params[name] <= 0:
            return "%s must be above 0, got %s" % (name, params[name])
    for name in at_least_zero:
        if params[name] < 0:
            return "%s must be 0 or more, got %s" % (name, params[name])
    return None


def _authority(url):
    """(scheme and ``//``, authority, rest) of ``url`` as written, without parsing it (nothing here raises)."""
    scheme, sep, rest = str(url).partition("://")
    if not sep:
        return "", "", str(url)
    end = min([i for i in (rest.find(c) for c in "/?#") if i >= 0] or [len(rest)])
    return scheme + sep, rest[:end], rest[end:]


def without_userinfo(url):
    """``url`` without the ``user:password@`` of its authority: the form a URL is shown, returned and written in."""
    head, authority, rest = _authority(url)
    return head + authority.rsplit("@", 1)[-1] + rest if "@" in authority else url


def url_secrets(*urls):
    """What must never be shown of ``urls``: the ``user:password@`` of each (as written and percent-decoded), and its
    password alone. A module adds them to ``AnsibleModule.no_log_values`` before anything else, so that its messages,
    warnings and the invocation Ansible prints at -vvv show ``********`` in their place."""
    found = set()
    for url in urls:
        authority = _authority(url or "")[1]
        if "@" not in authority:
            continue
        userinfo = authority.rsplit("@", 1)[0]
        password = userinfo.partition(":")[2]
        found.update((userinfo, unquote(userinfo)))
        found.update(p for p in (password, unquote(password)) if len(p) >= 4)
    found.discard("")
    return found


class Unreachable(Exception):
    """No HTTP answer at all: the message says which URL and why (never a header). ``refused``: the connection was
    refused (nothing listens there), as opposed to a timeout, a name or route that fails, or TLS."""

    def __init__(self, msg, refused=False):
        super().__init__(msg)
        self.refused = refused


def _refused(reason):
    return isinstance(reason, ConnectionRefusedError) or getattr(reason, "errno", None) == errno.ECONNREFUSED


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
        """The URL of ``path`` as shown in messages: without any user:password@ of the base URL."""
        parts = urlsplit(self.base_url + path)
        if "@" not in parts.netloc:
            return self.base_url + path
        return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rsplit("@", 1)[1]))

    def call(self, method, path, body=None):
        """Answer(status, parsed body) of ``method path``; raises Unreachable when no answer came."""
        headers = dict(self.headers)
        data = None
        if body is not None:
            data = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        try:
            resp = self.opener(self.base_url + path, data=data, headers=headers, method=method, timeout=self.timeout,
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
            raise Unreachable("%s %s: no answer (%s)" % (method, self.url(path), reason), refused=_refused(reason))
