"""sitelib.py - the production nginx site (nginx/hyserve.conf with its
upstream files, key map and TLS) in front of real `hyserve serve`
instances, all under a temporary prefix: the paths the packaged layout uses
(/etc/hyserve, /run/hyserve) rewritten into it, a loopback port, a
throwaway certificate, and hyserve-ctl pointed at it.  Each colour runs
with its FastCGI socket and its control socket where hyserve@.service puts
them (run/<colour>/fcgi.sock, run/<colour>/ctl.sock) and its instance
secret (`hyserve-ctl secret <colour>`, the nginx include the instance also
reads as [server] secret_file).

    site = sitelib.Site({"blue": {"engine": {"max_seqs": 1}}})
    site.start_colour("blue"); site.start_nginx()
    st, headers, body = site.https("GET", "/v1/models", key=secret)
    site.cleanup()

Environment: HY_SRCDIR (source tree), HYSERVE (the binary).
"""
import http.client as httpc
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile

import taplib
from taplib import free_port, wait_for

SRC = taplib.SRC
HYSERVE = taplib.HYSERVE
NGINX = taplib.NGINX
CTL = os.path.join(SRC, "scripts", "hyserve-ctl")
MODEL_ID = "hyserve-test"


def missing_tools():
    """What the site needs and this machine lacks (the caller skips)."""
    need = (("nginx", NGINX), ("openssl", shutil.which("openssl")),
            ("cgi-fcgi (libfcgi-bin)", shutil.which("cgi-fcgi")),
            ("/etc/nginx/fastcgi_params", taplib.FASTCGI_PARAMS
             if os.path.exists(taplib.FASTCGI_PARAMS) else None))
    return [n for n, p in need if p is None]


class Site:
    """colours: {"blue": {"section": {"key": value}}, ...}, ini keys merged
    over a small default (1 thread, 64 MiB cache, 2 workers x 4 threads).
    site_edit: a function of the site text, for a test that needs a setting
    changed (e.g. a shorter timeout); it must change something.
    model: the GGUF every colour serves (default: the default model);
    models: {colour: GGUF} for colours that serve another one."""

    def __init__(self, colours, model=None, max_conns=None, prefix="hysite-", site_edit=None,
                 models=None):
        self.tmp = tempfile.mkdtemp(prefix=prefix)
        os.chmod(self.tmp, 0o755)  # nginx workers run as nobody when the test is root
        self.etc = os.path.join(self.tmp, "etc")
        self.ngx_dir = os.path.join(self.etc, "nginx")
        self.port = free_port()
        self.model = model or taplib.default_model()[0]
        self.models = dict(models or {})
        self.procs, self._logs, self.nginx = {}, [], None
        self.sock, self.ctl_sock, self.ini, self.instance = {}, {}, {}, {}
        for d in (self.ngx_dir, os.path.join(self.etc, "tls"), os.path.join(self.tmp, "models")):
            os.makedirs(d, mode=0o755)
        self._tls()
        with open(os.path.join(SRC, "nginx", "hyserve.conf")) as f:
            site = self._rewrite(f.read(), max_conns)
        site = site.replace("listen 8443 ssl http2 ", "listen 127.0.0.1:%d ssl http2 " % self.port)
        site = "\n".join(l for l in site.splitlines() if "listen [::]" not in l) + "\n"
        if site_edit is not None:
            edited = site_edit(site)
            if edited == site:
                raise RuntimeError("site_edit changed nothing in nginx/hyserve.conf")
            site = edited
        with open(os.path.join(self.tmp, "site.conf"), "w") as f:
            f.write(site)
        for c in ("blue", "green"):
            os.makedirs(os.path.join(self.tmp, "run", c), mode=0o755)
            with open(os.path.join(SRC, "nginx", "upstream-%s.conf" % c)) as f:
                up = self._rewrite(f.read(), max_conns)
            with open(os.path.join(self.ngx_dir, "upstream-%s.conf" % c), "w") as f:
                f.write(up)
        os.symlink("upstream-%s.conf" % next(iter(colours)),
                   os.path.join(self.ngx_dir, "upstream-active.conf"))
        with open(os.path.join(self.tmp, "nginx.conf"), "w") as f:
            f.write(NGINX_CONF % {"p": self.tmp})
        self.nginx_cmd = [NGINX, "-p", self.tmp + "/", "-c", os.path.join(self.tmp, "nginx.conf"),
                          "-e", os.path.join(self.tmp, "error.log")]
        self.env = dict(os.environ, HYSERVE_NGINX_DIR=self.ngx_dir,
                        HYSERVE_NGINX=" ".join(self.nginx_cmd),
                        HYSERVE_NGINX_PID=os.path.join(self.tmp, "nginx.pid"))
        for c, extra in colours.items():
            self._colour_ini(c, extra or {})

    def _rewrite(self, text, max_conns):
        text = text.replace("/etc/hyserve/", self.etc + "/").replace("/run/hyserve/",
                                                                     self.tmp + "/run/")
        if max_conns is not None:
            text = text.replace("max_conns=64", "max_conns=%d" % max_conns)
        return text

    def _tls(self):
        r = subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                            "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj",
                            "/CN=localhost", "-keyout", os.path.join(self.etc, "tls", "key.pem"),
                            "-out", os.path.join(self.etc, "tls", "cert.pem")],
                           capture_output=True)
        if r.returncode != 0:
            raise RuntimeError("openssl: %s" % r.stderr.decode(errors="replace"))
        self.ssl = ssl.create_default_context()
        self.ssl.check_hostname = False
        self.ssl.verify_mode = ssl.CERT_NONE

    def secret(self, c):
        """The colour's instance secret (what nginx passes as HYSERVE_SECRET)."""
        with open(os.path.join(self.ngx_dir, "secret-%s.map" % c)) as f:
            return [l.split('"')[1] for l in f if l.strip() and not l.startswith("#")][0]

    def _colour_ini(self, c, extra):
        run = os.path.join(self.tmp, "run", c)
        rc, secret_file, e = self.ctl("secret", c, reload=False)
        if rc != 0:
            raise RuntimeError("hyserve-ctl secret %s: %s" % (c, e))
        self.sock[c], self.ctl_sock[c] = os.path.join(run, "fcgi.sock"), os.path.join(run, "ctl.sock")
        self.instance[c] = "%s-%d-%s" % (os.path.basename(self.tmp), self.port, c)
        os.makedirs(os.path.join(self.tmp, "models", c))
        # the same model id for every colour, as a switch requires
        path = os.path.join(self.tmp, "models", c, MODEL_ID + ".gguf")
        os.symlink(os.path.realpath(self.models.get(c, self.model)), path)
        conf = {
            "model": {"path": path, "threads": 1},
            "engine": {"max_seqs": 4, "max_context": 512},
            "cache": {"hot_mb": 64},
            "server": {"socket": self.sock[c], "control_socket": self.ctl_sock[c],
                       "socket_mode": "0666", "workers": 2, "threads_per_worker": 4,
                       "instance": self.instance[c],
                       "secret_file": secret_file.strip(),
                       "max_body_bytes": "1M", "drain_seconds": 10},
            "log": {"stderr": "true"},
        }
        for sec, kv in extra.items():
            conf.setdefault(sec, {}).update(kv)
        self.ini[c] = os.path.join(self.tmp, "%s.ini" % c)
        with open(self.ini[c], "w") as f:
            for sec, kv in conf.items():
                f.write("[%s]\n" % sec + "".join("%s = %s\n" % kv_ for kv_ in kv.items()))

    # ---- processes ----------------------------------------------------------
    def start_colour(self, c, timeout=60):
        """Starts `hyserve serve` for colour c; True once its /health is ok
        (probed through its own control socket)."""
        log = open(os.path.join(self.tmp, "serve-%s.log" % c), "w")
        self._logs.append(log)
        self.procs[c] = subprocess.Popen([HYSERVE, "serve", "-c", self.ini[c]], stdout=log,
                                         stderr=subprocess.STDOUT)
        return wait_for(lambda: self.procs[c].poll() is None and
                        b'"ok"' in self.probe(c, "/health"), timeout, 0.2)

    def stop_colour(self, c, timeout=30):
        p = self.procs.get(c)
        if p is None or p.poll() is not None:
            return p.returncode if p else None
        p.send_signal(signal.SIGTERM)
        try:
            return p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            return p.wait()

    def nginx_test(self):
        r = subprocess.run(self.nginx_cmd + ["-t", "-q"], capture_output=True, text=True)
        return r.returncode, r.stderr

    def start_nginx(self, timeout=15):
        self.nginx = subprocess.Popen(self.nginx_cmd, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL)
        return wait_for(lambda: self.https("GET", "/health", timeout=5)[0] == 200, timeout, 0.1)

    def probe(self, c, path, sock=None):
        """GET path straight through a colour's socket (cgi-fcgi), as
        hyserve-ctl does: the raw FastCGI answer, b"" when none."""
        env = {"REQUEST_METHOD": "GET", "DOCUMENT_URI": path, "SCRIPT_NAME": path,
               "REQUEST_URI": path, "SERVER_PROTOCOL": "HTTP/1.1", "PATH": os.environ["PATH"],
               "HYSERVE_SECRET": self.secret(c)}
        try:
            return subprocess.run(["cgi-fcgi", "-bind", "-connect", sock or self.ctl_sock[c]],
                                  env=env, capture_output=True, timeout=10).stdout
        except subprocess.TimeoutExpired:
            return b""

    def ctl(self, *args, reload=True):
        env = self.env if reload else dict(self.env, HYSERVE_NO_RELOAD="1")
        r = subprocess.run([CTL] + list(args), env=env, capture_output=True, text=True,
                           timeout=60)
        return r.returncode, r.stdout, r.stderr

    # ---- clients --------------------------------------------------------------
    def connection(self, timeout=60, source=None):
        return httpc.HTTPSConnection("127.0.0.1", self.port, timeout=timeout, context=self.ssl,
                                     source_address=(source, 0) if source else None)

    def https(self, method, path, body=None, key=None, headers=None, timeout=60, source=None):
        """One request; (status, {lower-case header: value}, body bytes)."""
        c = self.connection(timeout, source)
        h = {"Content-Type": "application/json"}
        if key is not None:
            h["Authorization"] = "Bearer " + key
        h.update(headers or {})
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        try:
            c.request(method, path, body=data, headers=h)
            r = c.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            c.close()

    def raw(self, data, timeout=10):
        """Sends bytes as they are over TLS (requests http.client would not
        write); (status, {lower-case header: value}, body) of the answer."""
        s = self.ssl.wrap_socket(socket.create_connection(("127.0.0.1", self.port), timeout),
                                 server_hostname="localhost")
        out = b""
        try:
            s.sendall(data)
            while True:
                try:
                    x = s.recv(65536)
                except (socket.timeout, ssl.SSLError, ConnectionError):
                    break
                if not x:
                    break
                out += x
        finally:
            s.close()
        head, _, body = out.partition(b"\r\n\r\n")
        lines = head.decode(errors="replace").split("\r\n")
        try:
            status = int(lines[0].split()[1])
        except (IndexError, ValueError):
            return -1, {}, out
        hdrs = {}
        for l in lines[1:]:
            k, _, v = l.partition(":")
            hdrs[k.strip().lower()] = v.strip()
        if hdrs.get("transfer-encoding") == "chunked":
            body = dechunk(body)
        return status, hdrs, body

    # ---- teardown ---------------------------------------------------------------
    def stop(self):
        if self.nginx is not None and self.nginx.poll() is None:
            self.nginx.send_signal(signal.SIGQUIT)
            try:
                self.nginx.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.nginx.kill()
                self.nginx.wait()
        rcs = {c: self.stop_colour(c) for c in list(self.procs)}
        for log in self._logs:
            log.close()
        self._logs = []
        return rcs

    def cleanup(self, keep=False):
        self.stop()
        if keep:
            taplib.diag("kept %s" % self.tmp)
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)


def dechunk(b):
    out = b""
    while b:
        size, _, rest = b.partition(b"\r\n")
        try:
            n = int(size.split(b";")[0], 16)
        except ValueError:
            break
        if n == 0:
            break
        out += rest[:n]
        b = rest[n + 2:]
    return out


NGINX_CONF = """daemon off;
master_process on;
worker_processes 2;
worker_shutdown_timeout 30s;
pid %(p)s/nginx.pid;
error_log %(p)s/error.log info;
events { worker_connections 512; }
http {
    access_log %(p)s/access.log;
    client_body_temp_path %(p)s/body;
    fastcgi_temp_path %(p)s/fastcgi;
    proxy_temp_path %(p)s/proxy;
    uwsgi_temp_path %(p)s/uwsgi;
    scgi_temp_path %(p)s/scgi;
    include %(p)s/site.conf;
}
"""
