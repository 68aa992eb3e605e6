// TLS 1.3 mutual-authentication contexts for the control channel (agent = server).
#include "common/tls.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <unistd.h>

#include <boost/system/system_error.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>

#include "common/unique_fd.hpp"

namespace rc::tls {
namespace ssl = boost::asio::ssl;

namespace {

// A client context refuses every agent until expectPeerName() names the one it dialled, so a
// caller that forgets it fails closed instead of accepting any agent of the CA.
constexpr const char* kNoPeerName = "peer-name-not-set.rdmachaos.invalid";

template <auto FreeFn>
struct Freer {
  template <typename T>
  void operator()(T* p) const {
    FreeFn(p);
  }
};
using PkeyPtr = std::unique_ptr<EVP_PKEY, Freer<EVP_PKEY_free>>;
using BioPtr = std::unique_ptr<BIO, Freer<BIO_free_all>>;

std::string sslErrors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? "unknown OpenSSL error" : out;
}

std::string fixHint(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  return fmt::format("run `rdmachaos certs init {}` to create it, or fix the path",
                     dir.empty() ? "DIR" : dir);
}

// Checked up front because OpenSSL's own message for a missing file ("system lib") does not
// say which file or what to do.
Result<void> checkReadable(const std::string& path, const char* what) {
  if (path.empty()) {
    return makeError(fmt::format("no {} file configured; run `rdmachaos certs init DIR`", what));
  }
  UniqueFD fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.isValid()) {
    int err = errno;
    return makeError(
        fmt::format("cannot read {} '{}': {}; {}", what, path, std::strerror(err), fixHint(path)),
        err);
  }
  return {};
}

// Never prompts: an agent has no terminal and an encrypted key would hang its start-up.
int refusePassphrase(char*, int, int, void*) { return -1; }

Result<PkeyPtr> readKey(const std::string& path) {
  BioPtr bio(BIO_new_file(path.c_str(), "r"));
  PkeyPtr key(bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, refusePassphrase, nullptr)
                  : nullptr);
  if (!key) {
    return makeError(fmt::format(
        "cannot load private key '{}': {}; it must be an unencrypted PEM key", path, sslErrors()));
  }
  return key;
}

// Settings both sides share: protocol pinned to TLS 1.3, the CA as the only trust anchor,
// this side's certificate and key.
Result<void> configure(SSL_CTX* h, const Material& m, int purpose) {
  if (auto r = checkReadable(m.caFile, "CA certificate"); !r) return r;
  if (auto r = checkReadable(m.certFile, "certificate"); !r) return r;
  if (auto r = checkReadable(m.keyFile, "private key"); !r) return r;

  if (SSL_CTX_set_min_proto_version(h, TLS1_3_VERSION) != 1 ||
      SSL_CTX_set_max_proto_version(h, TLS1_3_VERSION) != 1) {
    return makeError(fmt::format("cannot restrict TLS to version 1.3: {}", sslErrors()));
  }
  SSL_CTX_set_default_passwd_cb(h, refusePassphrase);

  if (SSL_CTX_load_verify_file(h, m.caFile.c_str()) != 1) {
    return makeError(fmt::format("cannot load CA certificate '{}': {}; it must be a PEM file",
                                 m.caFile, sslErrors()));
  }
  if (SSL_CTX_use_certificate_chain_file(h, m.certFile.c_str()) != 1) {
    return makeError(fmt::format("cannot load certificate '{}': {}; it must be a PEM file",
                                 m.certFile, sslErrors()));
  }
  auto key = readKey(m.keyFile);
  if (!key) return key.error();
  if (SSL_CTX_use_PrivateKey(h, key->get()) != 1 || SSL_CTX_check_private_key(h) != 1) {
    ERR_clear_error();
    return makeError(fmt::format(
        "private key '{}' does not match certificate '{}'; use the pair that `rdmachaos certs "
        "init` wrote together",
        m.keyFile, m.certFile));
  }

  SSL_CTX_set_verify(h, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  SSL_CTX_set_verify_depth(h, 4);
  if (SSL_CTX_set_purpose(h, purpose) != 1) {
    return makeError(fmt::format("cannot set the certificate purpose: {}", sslErrors()));
  }
  return {};
}

Result<ssl::context> makeContext(ssl::context::method method, const Material& m, int purpose,
                                 bool server) {
  ERR_clear_error();
  try {
    ssl::context ctx(method);
    SSL_CTX* h = ctx.native_handle();
    if (auto r = configure(h, m, purpose); !r) return r.error();
    if (server) {
      // Tells clients which CA to pick a certificate from.
      if (STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(m.caFile.c_str())) {
        SSL_CTX_set_client_CA_list(h, names);
      }
      // No resumption: every connection is a full handshake with a fresh certificate check,
      // and the agent keeps no ticket keys.
      SSL_CTX_set_num_tickets(h, 0);
      SSL_CTX_set_session_cache_mode(h, SSL_SESS_CACHE_OFF);
    } else {
      X509_VERIFY_PARAM* param = SSL_CTX_get0_param(h);
      X509_VERIFY_PARAM_set_hostflags(
          param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS | X509_CHECK_FLAG_NEVER_CHECK_SUBJECT);
      if (X509_VERIFY_PARAM_set1_host(param, kNoPeerName, 0) != 1) {
        return makeError(fmt::format("cannot set the default peer name: {}", sslErrors()));
      }
    }
    ERR_clear_error();
    return Result<ssl::context>(std::move(ctx));
  } catch (const boost::system::system_error& e) {
    return makeError(fmt::format("cannot create TLS context: {}", e.what()));
  } catch (const std::exception& e) {
    return makeError(fmt::format("cannot create TLS context: {}", e.what()));
  }
}

}  // namespace

Result<ssl::context> makeServerContext(const Material& m) {
  // SSL_CLIENT purpose: the client's certificate must carry clientAuth, so a stolen agent
  // certificate (serverAuth only) cannot drive other agents. OpenSSL picks this purpose for
  // servers by default; it is set explicitly so the rule does not hang on a library default.
  return makeContext(ssl::context::tls_server, m, X509_PURPOSE_SSL_CLIENT, true);
}

Result<ssl::context> makeClientContext(const Material& m) {
  return makeContext(ssl::context::tls_client, m, X509_PURPOSE_SSL_SERVER, false);
}

Result<void> expectPeerName(SSL* ssl, const std::string& name) {
  if (ssl == nullptr) return makeError("expectPeerName: no TLS connection");
  if (name.empty() || name.size() > 253 || name.find('\0') != std::string::npos) {
    return makeError(fmt::format("invalid peer name '{}'", name));
  }
  ERR_clear_error();
  // Only a DNS subjectAltName counts: falling back to the CN would let a controller
  // certificate (CN only) or any odd CN impersonate a node.
  SSL_set_hostflags(ssl,
                    X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS | X509_CHECK_FLAG_NEVER_CHECK_SUBJECT);
  if (SSL_set1_host(ssl, name.c_str()) != 1) {
    return makeError(fmt::format("cannot expect peer name '{}': {}", name, sslErrors()));
  }
  if (SSL_set_tlsext_host_name(ssl, name.c_str()) != 1) {
    return makeError(fmt::format("cannot set SNI '{}': {}", name, sslErrors()));
  }
  return {};
}

std::string peerCommonName(SSL* ssl) {
  if (ssl == nullptr) return {};
  X509* cert = SSL_get0_peer_certificate(ssl);
  if (cert == nullptr || SSL_get_verify_result(ssl) != X509_V_OK) return {};
  X509_NAME* subject = X509_get_subject_name(cert);
  int index = X509_NAME_get_index_by_NID(subject, NID_commonName, -1);
  if (index < 0) return {};
  ASN1_STRING* data = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, index));
  unsigned char* utf8 = nullptr;
  int len = ASN1_STRING_to_UTF8(&utf8, data);
  if (len < 0) return {};
  std::string cn(reinterpret_cast<char*>(utf8), static_cast<size_t>(len));
  OPENSSL_free(utf8);
  // An embedded NUL could make "a\0b" compare equal to "a" in C-string code downstream.
  if (cn.find('\0') != std::string::npos) return {};
  return cn;
}

}  // namespace rc::tls

namespace rc::tls {

std::string peerFingerprint(SSL* ssl) {
  if (ssl == nullptr) return {};
  X509* cert = SSL_get0_peer_certificate(ssl);
  if (cert == nullptr || SSL_get_verify_result(ssl) != X509_V_OK) return {};
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (X509_digest(cert, EVP_sha256(), md, &len) != 1) return {};
  static const char* hex = "0123456789abcdef";
  std::string out = "sha256:";
  for (unsigned int i = 0; i < len; i++) {
    out += hex[md[i] >> 4];
    out += hex[md[i] & 15];
  }
  return out;
}

}  // namespace rc::tls
