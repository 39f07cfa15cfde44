// The PostgreSQL server of the test run (tests/postgres/postgres_fixture.sh) and private schemas in
// it: each test opens its stores in a schema of its own (search_path in the connection URI), so
// tests never see each other's jobs.
#pragma once

#include <pqxx/pqxx>

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"

namespace posbias::jobs::testing {

// The URI from POSBIAS_TEST_POSTGRES_URI, or from the file named by POSBIAS_TEST_POSTGRES_URI_FILE
// (written by the fixture); "" when neither is set.
inline std::string TestPostgresUri() {
  if (const char* uri = std::getenv("POSBIAS_TEST_POSTGRES_URI"); uri != nullptr && *uri != '\0') return uri;
  if (const char* file = std::getenv("POSBIAS_TEST_POSTGRES_URI_FILE"); file != nullptr) {
    std::ifstream in(file);
    std::string uri;
    std::getline(in, uri);
    return uri;
  }
  return "";
}

inline std::string NoPostgresMessage() {
  return "no PostgreSQL server for the tests: run them through ctest (fixture.postgres_start), or set "
         "POSBIAS_TEST_POSTGRES_URI";
}

// A schema name from any text: lowercase letters, digits and '_', at most 63 bytes.
inline std::string SchemaName(const std::string& text) {
  std::string name = "t_";
  for (char c : text) {
    if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) {
      name.push_back(c);
    } else if (c >= 'A' && c <= 'Z') {
      name.push_back(static_cast<char>(c - 'A' + 'a'));
    } else {
      name.push_back('_');
    }
  }
  if (name.size() > 63) name = absl::StrCat(name.substr(0, 46), "_", std::hash<std::string>{}(name) % 10'000'000'000'000'000ULL);
  return name.substr(0, 63);
}

// `uri` with search_path set to `schema`.
inline std::string UriWithSchema(const std::string& uri, const std::string& schema) {
  return absl::StrCat(uri, uri.find('?') == std::string::npos ? "?" : "&", "options=-csearch_path%3D", schema);
}

// Drops (when present) and creates `schema`; returns the URI that uses it.
inline std::string FreshSchema(const std::string& uri, const std::string& schema) {
  pqxx::connection connection(uri);
  pqxx::work transaction(connection);
  transaction.exec(absl::StrCat("DROP SCHEMA IF EXISTS ", schema, " CASCADE"));
  transaction.exec(absl::StrCat("CREATE SCHEMA ", schema));
  transaction.commit();
  return UriWithSchema(uri, schema);
}

inline void DropSchema(const std::string& uri, const std::string& schema) {
  try {
    pqxx::connection connection(uri);
    pqxx::work transaction(connection);
    transaction.exec(absl::StrCat("DROP SCHEMA IF EXISTS ", schema, " CASCADE"));
    transaction.commit();
  } catch (const std::exception&) {
  }
}

// One value of a query in `schema`, as text.
inline std::string QueryValue(const std::string& schema_uri, const std::string& sql) {
  pqxx::connection connection(schema_uri);
  pqxx::work transaction(connection);
  const pqxx::result rows = transaction.exec(sql);
  return rows.empty() || rows[0][0].is_null() ? std::string() : std::string(rows[0][0].c_str());
}

}  // namespace posbias::jobs::testing
