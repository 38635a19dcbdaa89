// Target for tests/chrome.rs: a C++ program that uses much of libstdc++
// (strings, maps, vectors, string streams, an exception), so that every
// function of libstdc++ probed at once is exercised.
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>
#include <stdexcept>
int main() {
    std::map<std::string, int> counts;
    std::vector<std::string> words;
    for (int i = 0; i < 2000; i++) words.push_back("w" + std::to_string(i % 37));
    for (auto &w : words) counts[w]++;
    std::ostringstream out;
    long total = 0;
    for (auto &[k, v] : counts) { out << k << "=" << v << ";"; total += v; }
    try { throw std::runtime_error("boom"); } catch (const std::exception &e) { out << e.what(); }
    std::cout << counts.size() << " " << total << " " << out.str().size() << std::endl;
}
