// TLS 1.3 contexts with mutual authentication for the control channel. Kept out of widely
// included headers' way: only session code includes this (it pulls in Asio SSL).
#pragma once

#include <boost/asio/ssl/context.hpp>
#include <string>

#include "common/result.hpp"

namespace rc::tls {

struct Material {
  std::string caFile;    // PEM: the CA both sides trust
  std::string certFile;  // PEM: this side's certificate, signed by the CA
  std::string keyFile;   // PEM: its private key
};

// Server side (agent): TLS 1.3 only, requires a client certificate signed by the CA with
// the clientAuth purpose; peers without one fail the handshake and get nothing.
Result<boost::asio::ssl::context> makeServerContext(const Material& m);
// Client side (controller): TLS 1.3 only, verifies the agent's chain against the CA. The
// caller sets the expected host name per connection with expectPeerName().
Result<boost::asio::ssl::context> makeClientContext(const Material& m);
// Requires the peer certificate to carry NAME as a DNS subjectAltName (SSL_set1_host).
Result<void> expectPeerName(SSL* ssl, const std::string& name);
// The common name of the verified peer certificate ("" if none).
std::string peerCommonName(SSL* ssl);
// "sha256:<64 hex>" of the verified peer certificate's DER encoding ("" if none): the identity
// the agent binds leases and fault ownership to.
std::string peerFingerprint(SSL* ssl);

}  // namespace rc::tls
