// Creates a private CA and certificates for the controller and agents (rdmachaos certs init).
#pragma once

#include <string>
#include <vector>

#include "common/result.hpp"

namespace rc::certs {

struct Options {
  std::string dir;                       // created if missing (0700); files 0600 for keys
  std::vector<std::string> agentNames;   // one certificate per agent, SAN DNS:<name>
  int validDays = 825;
  bool overwrite = false;                // refuse to replace an existing CA unless set
};

// Writes DIR/ca.pem, ca.key, controller.pem, controller.key and for each agent NAME
// agent-NAME.pem, agent-NAME.key. With an existing CA (and !overwrite), reuses it and only
// adds missing agent certificates. Keys: EC P-256. Agent certs: serverAuth, SAN DNS:NAME;
// controller cert: clientAuth, CN "rdmachaos-controller".
Result<void> init(const Options& options);

// Issues one more certificate with an existing CA (e.g. for a test's rogue client).
Result<void> issue(const std::string& caCert, const std::string& caKey, const std::string& name,
                   bool clientAuth, const std::string& certOut, const std::string& keyOut,
                   int validDays = 825);
// A self-signed CA in a new directory (used by tests to make an untrusted CA).
Result<void> makeCa(const std::string& certOut, const std::string& keyOut, const std::string& cn,
                    int validDays = 825);

}  // namespace rc::certs
