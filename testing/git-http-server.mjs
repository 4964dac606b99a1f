// A git server for the tests' own internet (testing/test_internet.h): git's smart HTTP, served
// by Debian's `git http-backend` (a CGI program) behind this small HTTP server. Repositories
// under --root are served by path; a repository whose name starts with "private-" needs HTTP
// Basic authentication with --user and --token (what a deployment's registered git credential
// holds, docs/paseo.md "Git sources"). A repository whose name starts with "slow-" answers each
// request --slow-ms late (a clone that takes a while, for interrupted and concurrent creates).
// Every request is logged as a JSON line on stdout.
//
//   node git-http-server.mjs --root DIR --host 203.0.113.30 --port 80 --user U --token T [--slow-ms N]
//
// Prints {"listening": true} once listening; exits on SIGTERM. Only node: built-ins.
import { spawn } from "node:child_process";
import http from "node:http";

function arg(name, fallback) {
  const at = process.argv.indexOf(`--${name}`);
  if (at < 0) {
    if (fallback === undefined) throw new Error(`--${name} is required`);
    return fallback;
  }
  return process.argv[at + 1];
}

const root = arg("root");
const host = arg("host", "0.0.0.0");
const port = Number(arg("port", "80"));
const user = arg("user");
const token = arg("token");
const backend = arg("backend", "/usr/lib/git-core/git-http-backend");
const slowMs = Number(arg("slow-ms", "2000"));
const expected = `Basic ${Buffer.from(`${user}:${token}`).toString("base64")}`;

function log(entry) {
  process.stdout.write(`${JSON.stringify(entry)}\n`);
}

const server = http.createServer((req, res) => {
  const repo = new URL(req.url, "http://git.invalid").pathname.split("/")[1] ?? "";
  if (repo.startsWith("slow-")) setTimeout(() => handle(req, res), slowMs);
  else handle(req, res);
});

function handle(req, res) {
  const url = new URL(req.url, "http://git.invalid");
  const repo = url.pathname.split("/")[1] ?? "";
  const authorized = !repo.startsWith("private-") || req.headers.authorization === expected;
  log({ method: req.method, path: url.pathname, host: req.headers.host, repo, authorized,
        presented: req.headers.authorization ? "credentials" : "none" });
  if (!authorized) {
    res.writeHead(401, { "WWW-Authenticate": 'Basic realm="paseo test git"' });
    res.end("authentication required\n");
    return;
  }
  // CGI: the request line and headers as environment variables, the body on stdin, the
  // response (headers, blank line, body) on stdout.
  const env = {
    GIT_PROJECT_ROOT: root,
    GIT_HTTP_EXPORT_ALL: "1",
    PATH_INFO: url.pathname,
    QUERY_STRING: url.search.slice(1),
    REQUEST_METHOD: req.method,
    CONTENT_TYPE: req.headers["content-type"] ?? "",
    REMOTE_ADDR: req.socket.remoteAddress ?? "",
    REMOTE_USER: authorized && repo.startsWith("private-") ? user : "",
    HTTP_GIT_PROTOCOL: req.headers["git-protocol"] ?? "",
    HTTP_CONTENT_ENCODING: req.headers["content-encoding"] ?? "",
    PATH: "/usr/bin:/bin",
  };
  const cgi = spawn(backend, [], { env, stdio: ["pipe", "pipe", "inherit"] });
  req.pipe(cgi.stdin);
  let head = Buffer.alloc(0);
  let headersDone = false;
  cgi.stdout.on("data", (chunk) => {
    if (headersDone) {
      res.write(chunk);
      return;
    }
    head = Buffer.concat([head, chunk]);
    const end = head.indexOf("\r\n\r\n");
    if (end < 0) return;
    headersDone = true;
    let status = 200;
    const headers = {};
    for (const line of head.subarray(0, end).toString("latin1").split("\r\n")) {
      const colon = line.indexOf(":");
      if (colon < 0) continue;
      const name = line.slice(0, colon).trim();
      const value = line.slice(colon + 1).trim();
      if (name.toLowerCase() === "status") status = Number(value.split(" ")[0]);
      else headers[name] = value;
    }
    res.writeHead(status, headers);
    res.write(head.subarray(end + 4));
  });
  cgi.on("close", (code) => {
    if (!headersDone) {
      res.writeHead(500);
      res.end(`git http-backend exited ${code} without a response\n`);
      return;
    }
    res.end();
  });
}

server.listen(port, host, () => log({ listening: true, host, port }));
for (const sig of ["SIGTERM", "SIGINT"]) process.on(sig, () => process.exit(0));
