// Inventory parsing: every error says file:line:col and what to write instead.
#include "controller/fleet/inventory.hpp"

#include <fstream>
#include <set>
#include <sstream>
#include <toml++/toml.h>

#include "common/toml_text.hpp"

#include "common/protocol.hpp"

namespace rc::controller {
namespace {

std::string at(const std::string& src, const toml::source_region& r) {
  return src + ":" + std::to_string(r.begin.line) + ":" + std::to_string(r.begin.column);
}

std::string dirOf(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string resolve(const std::string& base, const std::string& p) {
  if (p.empty() || p.front() == '/') return p;
  return base + "/" + p;
}

}  // namespace

const Node* Inventory::find(const std::string& name) const {
  for (const auto& n : nodes)
    if (n.name == name) return &n;
  return nullptr;
}

Result<std::vector<const Node*>> Inventory::select(const std::string& selector) const {
  std::vector<const Node*> out;
  if (selector == "all") {
    for (const auto& n : nodes) out.push_back(&n);
    return out;
  }
  if (auto* n = find(selector)) return std::vector<const Node*>{n};
  for (const auto& n : nodes)
    for (const auto& r : n.roles)
      if (r == selector) out.push_back(&n);
  if (!out.empty()) return out;
  std::string names;
  for (const auto& n : nodes) names += (names.empty() ? "" : ", ") + n.name;
  return makeError("no node or role '" + selector + "' in " + path + " (nodes: " + names +
                   "; or use 'all')");
}

Result<Inventory> parseInventory(const std::string& text, const std::string& path) {
  toml::table root;
  try {
    root = rc::parseToml(text, path);
  } catch (const toml::parse_error& e) {
    return makeError(path + ":" + std::to_string(e.source().begin.line) + ":" +
                     std::to_string(e.source().begin.column) + ": " + std::string(e.description()));
  }
  Inventory inv;
  inv.path = path;
  std::string base = dirOf(path);
  for (auto&& [k, v] : root) {
    if (k != "tls" && k != "node" && k != "lab" && k != "defaults")
      return makeError(at(path, v.source()) + ": unknown key '" + std::string(k.str()) +
                       "' (known: tls, defaults, lab, node)");
  }
  auto* tls = root.get_as<toml::table>("tls");
  if (!tls)
    return makeError(path + ": missing [tls] with ca, cert and key (run `rdmachaos certs init DIR`)");
  for (const char* key : {"ca", "cert", "key"}) {
    auto* v = tls->get(key);
    if (!v || !v->is_string())
      return makeError((v ? at(path, v->source()) : path) + ": [tls] " + key +
                       " must be a path string");
  }
  inv.tls.caFile = resolve(base, tls->get_as<std::string>("ca")->get());
  inv.tls.certFile = resolve(base, tls->get_as<std::string>("cert")->get());
  inv.tls.keyFile = resolve(base, tls->get_as<std::string>("key")->get());
  uint16_t defaultPort = 7470;
  if (auto* d = root.get_as<toml::table>("defaults")) {
    if (auto* p = d->get("port")) {
      auto v = p->value<int64_t>();
      if (!v || *v < 1 || *v > 65535)
        return makeError(at(path, p->source()) + ": [defaults] port must be in 1..65535");
      defaultPort = uint16_t(*v);
    }
  }
  if (auto* lab = root.get_as<toml::table>("lab")) {
    if (auto* d = lab->get_as<std::string>("dir")) inv.labDir = d->get();
    if (auto* c = lab->get_as<std::string>("switch_control")) inv.switchControl = c->get();
  }

  auto* nodes = root.get_as<toml::array>("node");
  if (!nodes || nodes->empty())
    return makeError(path + ": no [[node]] entries: add one per agent with name and address");
  if (nodes->size() > 100000) return makeError(path + ": more than 100000 nodes");
  std::set<std::string> seen;
  for (auto& n : *nodes) {
    auto* t = n.as_table();
    if (!t) return makeError(at(path, n.source()) + ": [[node]] entries must be tables");
    Node node;
    node.port = defaultPort;
    for (auto&& [k, v] : *t) {
      std::string key(k.str());
      std::string where = at(path, v.source());
      if (key == "name" || key == "address") {
        if (!v.is_string()) return makeError(where + ": node " + key + " must be a string");
        (key == "name" ? node.name : node.address) = v.as_string()->get();
      } else if (key == "port") {
        auto p = v.value<int64_t>();
        if (!p || *p < 1 || *p > 65535) return makeError(where + ": port must be in 1..65535");
        node.port = uint16_t(*p);
      } else if (key == "data_interfaces" || key == "data_addresses" || key == "roles") {
        auto* arr = v.as_array();
        if (!arr) return makeError(where + ": " + key + " must be a list of strings");
        auto& dst = key == "data_interfaces" ? node.dataInterfaces
                    : key == "data_addresses" ? node.dataAddresses
                                              : node.roles;
        for (auto& e : *arr) {
          if (!e.is_string()) return makeError(at(path, e.source()) + ": " + key + " holds strings");
          dst.push_back(e.as_string()->get());
        }
      } else {
        return makeError(where + ": unknown node key '" + key +
                         "' (known: name, address, port, data_interfaces, data_addresses, roles)");
      }
    }
    std::string where = at(path, n.source());
    if (node.name.empty()) return makeError(where + ": node without a name");
    if (!proto::validId(node.name))
      return makeError(where + ": node name '" + node.name +
                       "' must be 1-64 characters of A-Z a-z 0-9 . _ -");
    if (node.name == "all") return makeError(where + ": 'all' is reserved; rename the node");
    if (node.address.empty()) return makeError(where + ": node '" + node.name + "' has no address");
    if (!seen.insert(node.name).second)
      return makeError(where + ": node '" + node.name + "' appears twice");
    inv.nodes.push_back(std::move(node));
  }
  return inv;
}

Result<Inventory> loadInventory(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    return makeError("cannot read inventory '" + path +
                     "': check the path (`rdmachaos lab up` prints the lab's inventory)");
  std::stringstream ss;
  ss << in.rdbuf();
  return parseInventory(ss.str(), path);
}

}  // namespace rc::controller
