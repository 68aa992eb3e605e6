// Private CA and certificate issuance for `rdmachaos certs init` (OpenSSL 3, EC P-256).
#include "common/certs.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>
#include <string_view>

#include "common/atomic_file.hpp"
#include "common/unique_fd.hpp"

namespace rc::certs {
namespace {

constexpr const char* kControllerName = "rdmachaos-controller";
constexpr int kMaxValidDays = 3650;

template <auto FreeFn>
struct Freer {
  template <typename T>
  void operator()(T* p) const {
    FreeFn(p);
  }
};
using PkeyPtr = std::unique_ptr<EVP_PKEY, Freer<EVP_PKEY_free>>;
using PkeyCtxPtr = std::unique_ptr<EVP_PKEY_CTX, Freer<EVP_PKEY_CTX_free>>;
using X509Ptr = std::unique_ptr<X509, Freer<X509_free>>;
using BioPtr = std::unique_ptr<BIO, Freer<BIO_free_all>>;
using BnPtr = std::unique_ptr<BIGNUM, Freer<BN_free>>;
using ExtPtr = std::unique_ptr<X509_EXTENSION, Freer<X509_EXTENSION_free>>;

enum class Role { ca, server, client };

// Drains OpenSSL's thread-local error queue so that a later failure does not report a stale
// reason.
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

Error sslError(std::string what) { return makeError(fmt::format("{}: {}", what, sslErrors())); }

Error sysError(std::string what, int err) {
  return makeError(fmt::format("{}: {}", what, std::strerror(err)), err);
}

// Names end up in file names (agent-NAME.pem) and in the SAN extension's config string, so
// the character set excludes '/', ',' and ':' by construction.
Result<void> validateName(const std::string& name) {
  bool ok = !name.empty() && name.size() <= 63;
  for (char c : name) {
    bool allowed = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                   c == '-' || c == '_' || c == '.';
    ok = ok && allowed;
  }
  if (!ok) {
    return makeError(fmt::format(
        "invalid agent name '{}': use 1-63 characters from A-Z a-z 0-9 - _ . (the inventory "
        "node name)",
        name));
  }
  return {};
}

Result<void> validateDays(int days) {
  if (days < 1 || days > kMaxValidDays) {
    return makeError(fmt::format("invalid validity of {} days: use 1 to {}", days, kMaxValidDays));
  }
  return {};
}

bool exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

Result<std::string> readFile(const std::string& path, const char* what) {
  UniqueFD fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.isValid()) return sysError(fmt::format("cannot read {} '{}'", what, path), errno);
  std::string data;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return sysError(fmt::format("cannot read {} '{}'", what, path), errno);
    if (n == 0) break;
    if (data.size() > (1u << 20)) return makeError(fmt::format("{} '{}' is too large", what, path));
    data.append(buf, static_cast<size_t>(n));
  }
  return data;
}

// Removes the temporary file unless the rename went through.
struct TempFileGuard {
  std::string path;
  ~TempFileGuard() {
    if (!path.empty()) ::unlink(path.c_str());
  }
};

// A key is written 0600 from the start (writeFileAtomic creates the temp file with its mode).
Result<void> writeAtomically(const std::string& path, std::string_view data, mode_t mode) {
  return writeFileAtomic(path, data, {.mode = mode});
}

Result<void> writeKey(const std::string& path, EVP_PKEY* key) {
  BioPtr bio(BIO_new(BIO_s_secmem()));
  if (!bio ||
      PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    return sslError(fmt::format("cannot encode private key for '{}'", path));
  }
  char* data = nullptr;
  long len = BIO_get_mem_data(bio.get(), &data);
  return writeAtomically(path, std::string_view(data, static_cast<size_t>(len)), 0600);
}

Result<void> writeCert(const std::string& path, X509* cert) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_X509(bio.get(), cert) != 1) {
    return sslError(fmt::format("cannot encode certificate for '{}'", path));
  }
  char* data = nullptr;
  long len = BIO_get_mem_data(bio.get(), &data);
  return writeAtomically(path, std::string_view(data, static_cast<size_t>(len)), 0644);
}

// Never prompts: a daemon has no terminal, and an encrypted key would block start-up.
int refusePassphrase(char*, int, int, void*) { return -1; }

Result<X509Ptr> readCert(const std::string& path) {
  auto pem = readFile(path, "certificate");
  if (!pem) return pem.error();
  BioPtr bio(BIO_new_mem_buf(pem->data(), static_cast<int>(pem->size())));
  X509Ptr cert(bio ? PEM_read_bio_X509(bio.get(), nullptr, refusePassphrase, nullptr) : nullptr);
  if (!cert) return sslError(fmt::format("'{}' is not a PEM certificate", path));
  return cert;
}

Result<PkeyPtr> readKey(const std::string& path) {
  auto pem = readFile(path, "private key");
  if (!pem) return pem.error();
  BioPtr bio(BIO_new_mem_buf(pem->data(), static_cast<int>(pem->size())));
  PkeyPtr key(bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, refusePassphrase, nullptr)
                  : nullptr);
  OPENSSL_cleanse(pem->data(), pem->size());
  if (!key) {
    return sslError(
        fmt::format("'{}' is not an unencrypted PEM private key (passphrase-protected keys are not "
                    "supported)",
                    path));
  }
  return key;
}

Result<PkeyPtr> generateKey() {
  PkeyCtxPtr ctx(EVP_PKEY_CTX_new_from_name(nullptr, "EC", nullptr));
  EVP_PKEY* raw = nullptr;
  if (!ctx || EVP_PKEY_keygen_init(ctx.get()) != 1 ||
      EVP_PKEY_CTX_set_group_name(ctx.get(), "P-256") != 1 ||
      EVP_PKEY_generate(ctx.get(), &raw) != 1) {
    return sslError("cannot generate an EC P-256 key");
  }
  return PkeyPtr(raw);
}

bool setRandomSerial(X509* cert) {
  unsigned char bytes[16];
  if (RAND_bytes(bytes, sizeof bytes) != 1) return false;
  bytes[sizeof bytes - 1] |= 1;  // a zero serial is not allowed (RFC 5280 4.1.2.2)
  BnPtr bn(BN_bin2bn(bytes, sizeof bytes, nullptr));
  return bn && BN_to_ASN1_INTEGER(bn.get(), X509_get_serialNumber(cert)) != nullptr;
}

bool addExtension(X509* cert, X509V3_CTX* ctx, int nid, const std::string& value) {
  ExtPtr ext(X509V3_EXT_conf_nid(nullptr, ctx, nid, value.c_str()));
  return ext && X509_add_ext(cert, ext.get(), -1) == 1;
}

// Builds and signs a certificate for SUBJECTKEY. Without ISSUER it is self-signed (the CA).
Result<X509Ptr> buildCert(const std::string& cn, Role role, EVP_PKEY* subjectKey, X509* issuer,
                          EVP_PKEY* issuerKey, int validDays) {
  X509Ptr cert(X509_new());
  if (!cert) return sslError("cannot allocate a certificate");
  X509* c = cert.get();
  X509* issuerCert = issuer ? issuer : c;
  X509_NAME* subject = X509_get_subject_name(c);
  auto ucn = reinterpret_cast<const unsigned char*>(cn.c_str());
  bool ok = X509_set_version(c, 2) == 1 && setRandomSerial(c) &&
            // Backdated a few minutes so that hosts with slightly skewed clocks accept it.
            X509_gmtime_adj(X509_getm_notBefore(c), -300) != nullptr &&
            X509_time_adj_ex(X509_getm_notAfter(c), validDays, 0, nullptr) != nullptr &&
            X509_NAME_add_entry_by_txt(subject, "O", MBSTRING_ASC,
                                       reinterpret_cast<const unsigned char*>("rdmachaos"), -1, -1,
                                       0) == 1 &&
            X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC, ucn, -1, -1, 0) == 1 &&
            X509_set_issuer_name(c, X509_get_subject_name(issuerCert)) == 1 &&
            X509_set_pubkey(c, subjectKey) == 1;
  if (!ok) return sslError(fmt::format("cannot fill in certificate for '{}'", cn));
  // A leaf cannot be valid longer than its CA; cap it so the expiry shown is the real one.
  if (issuer && ASN1_TIME_compare(X509_get0_notAfter(c), X509_get0_notAfter(issuer)) > 0 &&
      X509_set1_notAfter(c, X509_get0_notAfter(issuer)) != 1) {
    return sslError(fmt::format("cannot set the expiry of certificate for '{}'", cn));
  }

  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, issuerCert, c, nullptr, nullptr, 0);
  X509V3_set_issuer_pkey(&ctx, issuerKey);
  // The subject key id must exist before the authority key id of a self-signed CA refers to it.
  ok = addExtension(c, &ctx, NID_subject_key_identifier, "hash") &&
       addExtension(c, &ctx, NID_authority_key_identifier, "keyid:always");
  switch (role) {
    case Role::ca:
      ok = ok && addExtension(c, &ctx, NID_basic_constraints, "critical,CA:TRUE,pathlen:0") &&
           addExtension(c, &ctx, NID_key_usage, "critical,keyCertSign,cRLSign");
      break;
    case Role::server:
      ok = ok && addExtension(c, &ctx, NID_basic_constraints, "critical,CA:FALSE") &&
           addExtension(c, &ctx, NID_key_usage, "critical,digitalSignature") &&
           addExtension(c, &ctx, NID_ext_key_usage, "serverAuth") &&
           addExtension(c, &ctx, NID_subject_alt_name, "DNS:" + cn);
      break;
    case Role::client:
      ok = ok && addExtension(c, &ctx, NID_basic_constraints, "critical,CA:FALSE") &&
           addExtension(c, &ctx, NID_key_usage, "critical,digitalSignature") &&
           addExtension(c, &ctx, NID_ext_key_usage, "clientAuth");
      break;
  }
  if (!ok) return sslError(fmt::format("cannot add extensions to certificate for '{}'", cn));
  if (X509_sign(c, issuerKey, EVP_sha256()) <= 0) {
    return sslError(fmt::format("cannot sign certificate for '{}'", cn));
  }
  return cert;
}

// Key first: after a crash in between, the next run sees a missing certificate and re-issues
// both, rather than finding a certificate whose key is gone.
Result<void> issueWith(X509* ca, EVP_PKEY* caKey, const std::string& name, Role role,
                       const std::string& certOut, const std::string& keyOut, int validDays) {
  auto key = generateKey();
  if (!key) return key.error();
  auto cert = buildCert(name, role, key->get(), ca, caKey, validDays);
  if (!cert) return cert.error();
  if (auto r = writeKey(keyOut, key->get()); !r) return r;
  return writeCert(certOut, cert->get());
}

struct Ca {
  X509Ptr cert;
  PkeyPtr key;
};

Result<Ca> loadCa(const std::string& certPath, const std::string& keyPath) {
  auto cert = readCert(certPath);
  if (!cert) return cert.error();
  auto key = readKey(keyPath);
  if (!key) return key.error();
  if (X509_check_private_key(cert->get(), key->get()) != 1) {
    ERR_clear_error();
    return makeError(
        fmt::format("CA key '{}' does not match CA certificate '{}'", keyPath, certPath));
  }
  return Ca{std::move(*cert), std::move(*key)};
}

Result<Ca> createCa(const std::string& certPath, const std::string& keyPath, const std::string& cn,
                    int validDays) {
  auto key = generateKey();
  if (!key) return key.error();
  auto cert = buildCert(cn, Role::ca, key->get(), nullptr, key->get(), validDays);
  if (!cert) return cert.error();
  if (auto r = writeKey(keyPath, key->get()); !r) return r.error();
  if (auto r = writeCert(certPath, cert->get()); !r) return r.error();
  return Ca{std::move(*cert), std::move(*key)};
}

// With a reused CA an existing leaf is kept, but only if it belongs to that CA and to its
// key: silently keeping a stale pair would surface later as a confusing handshake failure.
Result<bool> keepExisting(const Ca& ca, const std::string& certPath, const std::string& keyPath) {
  if (!exists(certPath) || !exists(keyPath)) return false;
  auto cert = readCert(certPath);
  if (!cert) return cert.error();
  auto key = readKey(keyPath);
  if (!key) return key.error();
  if (X509_verify(cert->get(), ca.key.get()) != 1) {
    ERR_clear_error();
    return makeError(fmt::format(
        "'{}' was not issued by the CA in this directory; delete it (and its key) to re-issue, "
        "or use --overwrite to start over with a new CA",
        certPath));
  }
  if (X509_check_private_key(cert->get(), key->get()) != 1) {
    ERR_clear_error();
    return makeError(fmt::format(
        "key '{}' does not match certificate '{}'; delete both to re-issue", keyPath, certPath));
  }
  return true;
}

Result<void> ensureDirectory(const std::string& dir) {
  std::filesystem::path p(dir);
  std::error_code ec;
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return sysError(fmt::format("cannot create certificate directory '{}'", dir), errno);
  }
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) {
    return sysError(fmt::format("cannot use certificate directory '{}'", dir), errno);
  }
  if (!S_ISDIR(st.st_mode)) {
    return makeError(fmt::format("'{}' exists and is not a directory", dir), ENOTDIR);
  }
  return {};
}

}  // namespace

Result<void> init(const Options& options) {
  ERR_clear_error();
  if (options.dir.empty()) return makeError("no certificate directory given");
  if (auto r = validateDays(options.validDays); !r) return r;
  std::set<std::string> seen;
  for (const auto& name : options.agentNames) {
    if (auto r = validateName(name); !r) return r;
    if (name == kControllerName) {
      return makeError(fmt::format("agent name '{}' is reserved for the controller", name));
    }
    if (!seen.insert(name).second) {
      return makeError(fmt::format("agent name '{}' is given more than once", name));
    }
  }
  if (auto r = ensureDirectory(options.dir); !r) return r;

  auto path = [&](const std::string& file) {
    return (std::filesystem::path(options.dir) / file).string();
  };
  const std::string caCert = path("ca.pem");
  const std::string caKey = path("ca.key");

  bool reuse = false;
  if (!options.overwrite) {
    bool haveCert = exists(caCert);
    bool haveKey = exists(caKey);
    if (haveCert && !haveKey) {
      return makeError(fmt::format(
          "'{}' exists but its key '{}' is missing: restore the key to add certificates, or "
          "use --overwrite to create a new CA (all existing certificates stop working)",
          caCert, caKey));
    }
    if (haveKey && !haveCert) {
      return makeError(fmt::format(
          "'{}' exists but the CA certificate '{}' is missing: restore it, or use --overwrite "
          "to create a new CA",
          caKey, caCert));
    }
    reuse = haveCert && haveKey;
  }

  auto ca =
      reuse ? loadCa(caCert, caKey) : createCa(caCert, caKey, "rdmachaos CA", options.validDays);
  if (!ca) return ca.error();

  auto ensureLeaf = [&](const std::string& name, Role role,
                        const std::string& base) -> Result<void> {
    const std::string cert = path(base + ".pem");
    const std::string key = path(base + ".key");
    if (reuse) {
      auto keep = keepExisting(*ca, cert, key);
      if (!keep) return keep.error();
      if (*keep) return {};
    }
    return issueWith(ca->cert.get(), ca->key.get(), name, role, cert, key, options.validDays);
  };

  if (auto r = ensureLeaf(kControllerName, Role::client, "controller"); !r) return r;
  for (const auto& name : options.agentNames) {
    if (auto r = ensureLeaf(name, Role::server, "agent-" + name); !r) return r;
  }
  return {};
}

Result<void> issue(const std::string& caCert, const std::string& caKey, const std::string& name,
                   bool clientAuth, const std::string& certOut, const std::string& keyOut,
                   int validDays) {
  ERR_clear_error();
  if (auto r = validateName(name); !r) return r;
  if (auto r = validateDays(validDays); !r) return r;
  auto ca = loadCa(caCert, caKey);
  if (!ca) return ca.error();
  return issueWith(ca->cert.get(), ca->key.get(), name, clientAuth ? Role::client : Role::server,
                   certOut, keyOut, validDays);
}

Result<void> makeCa(const std::string& certOut, const std::string& keyOut, const std::string& cn,
                    int validDays) {
  ERR_clear_error();
  if (auto r = validateDays(validDays); !r) return r;
  if (cn.empty() || cn.size() > 64) {
    return makeError(fmt::format("invalid CA name '{}': use 1-64 characters", cn));
  }
  auto ca = createCa(certOut, keyOut, cn, validDays);
  if (!ca) return ca.error();
  return {};
}

}  // namespace rc::certs
