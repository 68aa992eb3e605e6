// Unit tests for certificate issuance (certs) and the mutual-TLS contexts (tls) over loopback.
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/write.hpp>
#include <catch2/catch.hpp>
#include "test_util.hpp"
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>

#include "common/certs.hpp"
#include "common/tls.hpp"

// This source in a namespace of its own: the unit sources build one program from unity
// chunks (tests/meson.build), where the file-scope names of two sources would meet.
namespace test_certs {

namespace asio = boost::asio;
namespace ssl = boost::asio::ssl;
using asio::ip::tcp;
using boost::system::error_code;

namespace {

template <auto FreeFn>
struct Freer {
  template <typename T>
  void operator()(T* p) const {
    FreeFn(p);
  }
};
using X509Ptr = std::unique_ptr<X509, Freer<X509_free>>;
using StorePtr = std::unique_ptr<X509_STORE, Freer<X509_STORE_free>>;
using StoreCtxPtr = std::unique_ptr<X509_STORE_CTX, Freer<X509_STORE_CTX_free>>;
using FilePtr = std::unique_ptr<FILE, Freer<fclose>>;

using rctest::TempDir;

unsigned permissions(const std::string& path) {
  struct stat st;
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

X509Ptr readCert(const std::string& path) {
  FilePtr f(std::fopen(path.c_str(), "r"));
  REQUIRE(f);
  X509Ptr cert(PEM_read_X509(f.get(), nullptr, nullptr, nullptr));
  REQUIRE(cert);
  return cert;
}

// X509_verify_cert against a store holding only CAPATH, as a TLS peer would.
bool verifies(const std::string& caPath, const std::string& certPath, int purpose) {
  X509Ptr ca = readCert(caPath);
  X509Ptr cert = readCert(certPath);
  StorePtr store(X509_STORE_new());
  StoreCtxPtr ctx(X509_STORE_CTX_new());
  REQUIRE(X509_STORE_add_cert(store.get(), ca.get()) == 1);
  REQUIRE(X509_STORE_CTX_init(ctx.get(), store.get(), cert.get(), nullptr) == 1);
  REQUIRE(X509_STORE_CTX_set_purpose(ctx.get(), purpose) == 1);
  return X509_verify_cert(ctx.get()) == 1;
}

rc::tls::Material agentMaterial(const TempDir& d, const std::string& name) {
  return {d.file("pki/ca.pem"), d.file("pki/agent-" + name + ".pem"),
          d.file("pki/agent-" + name + ".key")};
}
rc::tls::Material controllerMaterial(const TempDir& d) {
  return {d.file("pki/ca.pem"), d.file("pki/controller.pem"), d.file("pki/controller.key")};
}

struct Outcome {
  bool serverDone = false;
  error_code server;
  long serverVerify = -1;  // X509_V_*: why the server rejected the client's certificate
  std::string serverSawCn;
  bool clientDone = false;
  error_code client;
  long clientVerify = -1;
  int clientVersion = 0;
  bool clientGotGreeting = false;  // only a peer the server accepted may receive anything
};

// One TLS connection over 127.0.0.1: the server greets an accepted client with "ok". Both
// sides run on one io_context bounded by run_for, so a broken case fails instead of hanging.
Outcome connect(ssl::context& serverCtx, ssl::context& clientCtx, const std::string& peerName) {
  Outcome out;
  asio::io_context io;
  tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  ssl::stream<tcp::socket> server(io, serverCtx);
  ssl::stream<tcp::socket> client(io, clientCtx);
  if (!peerName.empty()) REQUIRE(rc::tls::expectPeerName(client.native_handle(), peerName));
  const char greeting[2] = {'o', 'k'};
  char received[2] = {};

  acceptor.async_accept(server.lowest_layer(), [&](error_code ec) {
    if (ec) {
      out.serverDone = true;
      out.server = ec;
      return;
    }
    server.async_handshake(ssl::stream_base::server, [&](error_code hec) {
      out.serverDone = true;
      out.server = hec;
      out.serverVerify = SSL_get_verify_result(server.native_handle());
      if (hec) {
        server.lowest_layer().close();
        return;
      }
      out.serverSawCn = rc::tls::peerCommonName(server.native_handle());
      asio::async_write(server, asio::buffer(greeting), [](error_code, size_t) {});
    });
  });
  client.lowest_layer().async_connect(acceptor.local_endpoint(), [&](error_code ec) {
    if (ec) {
      out.clientDone = true;
      out.client = ec;
      return;
    }
    client.async_handshake(ssl::stream_base::client, [&](error_code hec) {
      out.clientDone = true;
      out.client = hec;
      out.clientVerify = SSL_get_verify_result(client.native_handle());
      if (hec) {
        client.lowest_layer().close();
        return;
      }
      out.clientVersion = SSL_version(client.native_handle());
      // TLS 1.3 finishes the client side before the server has checked the client's
      // certificate; the read shows what a rejected client really gets: nothing.
      asio::async_read(client, asio::buffer(received), [&](error_code rec, size_t n) {
        out.clientGotGreeting = !rec && n == 2 && received[0] == 'o' && received[1] == 'k';
      });
    });
  });
  io.run_for(std::chrono::seconds(10));
  return out;
}

void initPki(const TempDir& d, std::vector<std::string> agents) {
  rc::certs::Options options;
  options.dir = d.file("pki");
  options.agentNames = std::move(agents);
  auto r = rc::certs::init(options);
  INFO((r ? std::string() : r.error().message));
  REQUIRE(r);
}

}  // namespace

TEST_CASE("certs init creates a CA, controller and agent certificates with tight permissions") {
  TempDir d;
  initPki(d, {"n1"});

  CHECK(permissions(d.file("pki")) == 0700);
  for (const char* key : {"ca.key", "controller.key", "agent-n1.key"}) {
    INFO(key);
    CHECK(permissions(d.file(std::string("pki/") + key)) == 0600);
  }
  for (const char* cert : {"ca.pem", "controller.pem", "agent-n1.pem"}) {
    INFO(cert);
    CHECK(permissions(d.file(std::string("pki/") + cert)) == 0644);
  }
  // No temporary files left behind by the atomic writes.
  int entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(d.file("pki"))) {
    ++entries;
  }
  CHECK(entries == 6);

  SECTION("the agent certificate chains to the CA for serverAuth and names n1 in its SAN") {
    CHECK(verifies(d.file("pki/ca.pem"), d.file("pki/agent-n1.pem"), X509_PURPOSE_SSL_SERVER));
    CHECK_FALSE(
        verifies(d.file("pki/ca.pem"), d.file("pki/agent-n1.pem"), X509_PURPOSE_SSL_CLIENT));
    X509Ptr cert = readCert(d.file("pki/agent-n1.pem"));
    auto* names = static_cast<GENERAL_NAMES*>(
        X509_get_ext_d2i(cert.get(), NID_subject_alt_name, nullptr, nullptr));
    REQUIRE(names != nullptr);
    std::vector<std::string> dns;
    for (int i = 0; i < sk_GENERAL_NAME_num(names); ++i) {
      const GENERAL_NAME* n = sk_GENERAL_NAME_value(names, i);
      if (n->type == GEN_DNS) {
        dns.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(n->d.dNSName)),
                         static_cast<size_t>(ASN1_STRING_length(n->d.dNSName)));
      }
    }
    GENERAL_NAMES_free(names);
    CHECK(dns == std::vector<std::string>{"n1"});
    CHECK(X509_check_host(cert.get(), "n2", 0, 0, nullptr) != 1);
  }

  SECTION("the controller certificate is for clientAuth only") {
    CHECK(verifies(d.file("pki/ca.pem"), d.file("pki/controller.pem"), X509_PURPOSE_SSL_CLIENT));
    CHECK_FALSE(
        verifies(d.file("pki/ca.pem"), d.file("pki/controller.pem"), X509_PURPOSE_SSL_SERVER));
  }

  SECTION("re-running init adds a new agent and keeps the CA and existing certificates") {
    const std::string ca = slurp(d.file("pki/ca.pem"));
    const std::string caKey = slurp(d.file("pki/ca.key"));
    const std::string n1 = slurp(d.file("pki/agent-n1.pem"));
    const std::string controller = slurp(d.file("pki/controller.pem"));
    initPki(d, {"n1", "n2"});
    CHECK(slurp(d.file("pki/ca.pem")) == ca);
    CHECK(slurp(d.file("pki/ca.key")) == caKey);
    CHECK(slurp(d.file("pki/agent-n1.pem")) == n1);
    CHECK(slurp(d.file("pki/controller.pem")) == controller);
    CHECK(permissions(d.file("pki/agent-n2.key")) == 0600);
    CHECK(verifies(d.file("pki/ca.pem"), d.file("pki/agent-n2.pem"), X509_PURPOSE_SSL_SERVER));
  }

  SECTION("overwrite replaces the CA") {
    const std::string ca = slurp(d.file("pki/ca.pem"));
    rc::certs::Options options;
    options.dir = d.file("pki");
    options.agentNames = {"n1"};
    options.overwrite = true;
    REQUIRE(rc::certs::init(options));
    CHECK(slurp(d.file("pki/ca.pem")) != ca);
    CHECK(verifies(d.file("pki/ca.pem"), d.file("pki/agent-n1.pem"), X509_PURPOSE_SSL_SERVER));
  }

  SECTION("a CA certificate without its key is an error, not a silent new CA") {
    std::filesystem::remove(d.file("pki/ca.key"));
    rc::certs::Options options;
    options.dir = d.file("pki");
    options.agentNames = {"n2"};
    auto r = rc::certs::init(options);
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().message, Catch::Contains("ca.key"));
    CHECK_FALSE(std::filesystem::exists(d.file("pki/agent-n2.pem")));
  }
}

TEST_CASE("certs init rejects bad agent names and names them") {
  TempDir d;
  auto bad = GENERATE(as<std::string>{}, "", "a/b", "n 1", "x,DNS:evil", std::string(64, 'a'));
  rc::certs::Options options;
  options.dir = d.file("pki");
  options.agentNames = {"ok-1", bad};
  auto r = rc::certs::init(options);
  REQUIRE_FALSE(r);
  CHECK_THAT(r.error().message, Catch::Contains("'" + bad + "'"));
  CHECK_FALSE(std::filesystem::exists(d.file("pki/ca.pem")));
}

TEST_CASE("mutual TLS 1.3 over loopback") {
  TempDir d;
  initPki(d, {"n1"});
  auto serverCtx = rc::tls::makeServerContext(agentMaterial(d, "n1"));
  REQUIRE(serverCtx);

  SECTION("controller and agent from the same CA: handshake succeeds") {
    auto clientCtx = rc::tls::makeClientContext(controllerMaterial(d));
    REQUIRE(clientCtx);
    Outcome o = connect(*serverCtx, *clientCtx, "n1");
    REQUIRE(o.serverDone);
    REQUIRE(o.clientDone);
    CHECK_FALSE(o.server);
    CHECK_FALSE(o.client);
    CHECK(o.clientVersion == TLS1_3_VERSION);
    CHECK(o.serverVerify == X509_V_OK);
    CHECK(o.clientVerify == X509_V_OK);
    CHECK(o.serverSawCn == "rdmachaos-controller");
    CHECK(o.clientGotGreeting);
  }

  SECTION("a client certificate from another CA is rejected") {
    REQUIRE(rc::certs::makeCa(d.file("other-ca.pem"), d.file("other-ca.key"), "rogue CA"));
    REQUIRE(rc::certs::issue(d.file("other-ca.pem"), d.file("other-ca.key"), "rdmachaos-controller",
                             true, d.file("rogue.pem"), d.file("rogue.key")));
    // Trusts the real CA so that only the server's check can fail.
    auto clientCtx = rc::tls::makeClientContext(
        {d.file("pki/ca.pem"), d.file("rogue.pem"), d.file("rogue.key")});
    REQUIRE(clientCtx);
    Outcome o = connect(*serverCtx, *clientCtx, "n1");
    REQUIRE(o.serverDone);
    CHECK(o.server);
    CHECK(o.serverVerify == X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY);
    CHECK(o.serverSawCn.empty());
    CHECK_FALSE(o.clientGotGreeting);
  }

  SECTION("a client without a certificate is rejected") {
    ssl::context clientCtx(ssl::context::tls_client);
    clientCtx.load_verify_file(d.file("pki/ca.pem"));
    clientCtx.set_verify_mode(ssl::verify_peer);
    Outcome o = connect(*serverCtx, clientCtx, "n1");
    REQUIRE(o.serverDone);
    CHECK(o.server);
    CHECK_FALSE(o.clientGotGreeting);
  }

  SECTION("an agent certificate (serverAuth only) cannot act as a controller") {
    auto clientCtx = rc::tls::makeClientContext(agentMaterial(d, "n1"));
    REQUIRE(clientCtx);
    Outcome o = connect(*serverCtx, *clientCtx, "n1");
    REQUIRE(o.serverDone);
    CHECK(o.server);
    CHECK(o.serverVerify == X509_V_ERR_INVALID_PURPOSE);
    CHECK(o.serverSawCn.empty());
    CHECK_FALSE(o.clientGotGreeting);
  }

  SECTION("the controller rejects an agent whose SAN is not the expected node name") {
    auto clientCtx = rc::tls::makeClientContext(controllerMaterial(d));
    REQUIRE(clientCtx);
    Outcome o = connect(*serverCtx, *clientCtx, "n2");
    REQUIRE(o.clientDone);
    CHECK(o.client);
    CHECK(o.clientVerify == X509_V_ERR_HOSTNAME_MISMATCH);
    CHECK(o.clientVersion == 0);
    CHECK_FALSE(o.clientGotGreeting);
  }

  SECTION("a controller that never calls expectPeerName fails closed") {
    auto clientCtx = rc::tls::makeClientContext(controllerMaterial(d));
    REQUIRE(clientCtx);
    Outcome o = connect(*serverCtx, *clientCtx, "");
    REQUIRE(o.clientDone);
    CHECK(o.client);
    CHECK(o.clientVerify == X509_V_ERR_HOSTNAME_MISMATCH);
  }
}

TEST_CASE("TLS contexts report unusable material with the file and the fix") {
  TempDir d;
  initPki(d, {"n1"});

  SECTION("missing file") {
    auto m = agentMaterial(d, "n1");
    m.caFile = d.file("pki/missing-ca.pem");
    auto r = rc::tls::makeServerContext(m);
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().message, Catch::Contains("'" + m.caFile + "'"));
    CHECK_THAT(r.error().message, Catch::Contains("rdmachaos certs init"));
  }

  SECTION("key that does not belong to the certificate") {
    auto m = controllerMaterial(d);
    m.keyFile = d.file("pki/agent-n1.key");
    auto r = rc::tls::makeClientContext(m);
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().message, Catch::Contains("does not match"));
    CHECK_THAT(r.error().message, Catch::Contains(m.keyFile));
  }

  SECTION("a file that is not PEM") {
    auto m = agentMaterial(d, "n1");
    std::ofstream(d.file("garbage.pem")) << "not a certificate\n";
    m.caFile = d.file("garbage.pem");
    auto r = rc::tls::makeServerContext(m);
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().message, Catch::Contains(m.caFile));
  }
}

}  // namespace test_certs
