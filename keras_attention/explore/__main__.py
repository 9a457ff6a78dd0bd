"""`python -m keras_attention.explore RUN [--port 8000] [--host H]`: serves
the attention explorer for a trained run on a local web page;
`--html OUT "text"` writes the same page, with that text's answer inside
it, as one file that opens from disk.

The page is the standard library's HTTP server, one HTML file with its
script and styles inlined, and plain JavaScript and SVG: no internet, no
build step, nothing to install beyond this package.
"""

import argparse
import ipaddress
import json
import sys
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_REQUEST_BYTES = 1 << 20


def render_page(info, answer=None):
    """The page as one HTML string: the script, the styles and (for the
    standalone file) the answer inlined."""
    from importlib import resources

    folder = resources.files("keras_attention.explore") / "page"
    html = (folder / "explorer.html").read_text(encoding="utf-8")
    data = {"info": info, "answer": answer, "static": answer is not None}
    # `</` would end the script element early; JSON allows `<\/` for it.
    data = json.dumps(data, ensure_ascii=False).replace("</", "<\\/")
    parts = {
        "/*STYLES*/": (folder / "explorer.css").read_text(encoding="utf-8"),
        "/*DATA*/": f"window.EXPLORER = {data};",
        "/*SCRIPT*/": (folder / "explorer.js").read_text(encoding="utf-8"),
    }
    for placeholder, text in parts.items():
        html = html.replace(placeholder, text)
    return html


def make_server(explorer, host="127.0.0.1", port=8000):
    """An HTTP server for `explorer`: `GET /` the page, `GET /api/info`,
    `POST /api/answer` with `{"text": ..., "beam_size": ...}`. One answer
    at a time (the model is not shared between threads)."""
    from keras_attention.explore import ExplorerError

    lock = threading.Lock()
    page = render_page(explorer.info()).encode("utf-8")

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format, *args):  # one line a request, no noise
            sys.stderr.write(f"{self.command} {self.path} {args[1] if len(args) > 1 else ''}\n")

        def _send(self, status, body, content_type="application/json; charset=utf-8"):
            if not isinstance(body, bytes):
                body = json.dumps(body, ensure_ascii=False).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path in ("/", "/index.html"):
                self._send(HTTPStatus.OK, page, "text/html; charset=utf-8")
            elif self.path == "/api/info":
                self._send(HTTPStatus.OK, explorer.info())
            else:
                self._send(HTTPStatus.NOT_FOUND, {"error": f"no page at {self.path}"})

        def do_POST(self):
            if self.path != "/api/answer":
                self._send(HTTPStatus.NOT_FOUND, {"error": f"no page at {self.path}"})
                return
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_REQUEST_BYTES:
                self._send(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, {"error": "the text is too long"})
                return
            body = self.rfile.read(length)
            try:
                request = json.loads(body.decode("utf-8"))
                if not isinstance(request, dict):
                    raise ExplorerError('The request must be {"text": ...}.')
                unknown = set(request) - {"text", "beam_size"}
                if unknown:
                    raise ExplorerError(f"Unknown request fields: {', '.join(sorted(unknown))}")
                with lock:
                    answer = explorer.answer(request.get("text"), request.get("beam_size"))
            except UnicodeDecodeError:
                self._send(HTTPStatus.BAD_REQUEST, {"error": "The text is not valid UTF-8."})
            except json.JSONDecodeError as error:
                self._send(HTTPStatus.BAD_REQUEST, {"error": f"The request is not JSON: {error}"})
            except ExplorerError as error:
                self._send(HTTPStatus.BAD_REQUEST, {"error": str(error)})
            else:
                self._send(HTTPStatus.OK, answer)

    return ThreadingHTTPServer((host, port), Handler)


def is_loopback(host):
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m keras_attention.explore",
        description="See a trained run's attention at work, in a local web page.",
    )
    parser.add_argument("run", help="a training run's folder, or the model.keras in one")
    parser.add_argument("--port", type=int, default=8000, help="the page's port (default 8000)")
    parser.add_argument(
        "--host",
        default=None,
        help="the address to serve on (default 127.0.0.1: this machine only)",
    )
    parser.add_argument(
        "--html",
        nargs=2,
        metavar=("OUT", "TEXT"),
        help="write the page for TEXT as one standalone HTML file OUT, and stop",
    )
    args = parser.parse_args(argv)
    if not 0 <= args.port <= 65535:
        parser.error(f"--port must be from 0 to 65535; got {args.port}")

    from keras_attention.explore import Explorer, ExplorerError
    from keras_attention.files import write_atomically

    try:
        explorer = Explorer(args.run)
        if args.html:
            out, text = args.html
            answer = explorer.answer(text)
    except ExplorerError as error:
        raise SystemExit(f"error: {error}") from None
    if args.html:
        write_atomically(out, render_page(explorer.info(), answer))
        if answer["notice"]:
            print(answer["notice"])
        print(f"wrote {out}: open it in a browser, no server needed")
        return out

    host = args.host or "127.0.0.1"
    try:
        server = make_server(explorer, host, args.port)
    except OSError as error:
        raise SystemExit(f"error: cannot serve on {host}:{args.port}: {error}") from None
    port = server.server_address[1]
    if args.host is not None:
        reach = "this machine only" if is_loopback(host) else "anyone who can reach this address"
        print(f"--host {host}: the page is open to {reach}")
    print(f"The attention explorer for {explorer.files.folder}: http://{host}:{port}/", flush=True)
    print("(Ctrl+C stops it)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
