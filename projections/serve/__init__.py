"""``evstore serve``: browse runs, states and diffs in a browser; append over HTTP with a token.

Starlette + uvicorn, Jinja2 pages rendered on the server, one small script and one stylesheet
served from ``static/`` (no build step, no CDN).  See :mod:`projections.serve.app`.
"""

from __future__ import annotations

from projections.serve.app import ServeConfig, create_app, is_loopback

__all__ = ["ServeConfig", "create_app", "is_loopback"]
