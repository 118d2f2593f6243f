// RUN: nanoir-opt %s -p 'lower-to-hw{host=true}' --split-input-file | filecheck %s
// RUN: nanoir-opt %s -p lower-to-hw --split-input-file --verify-diagnostics 2>&1 | filecheck %s --check-prefix=REFUSED

// lower-to-hw{host=true}: what the engine cannot run stays float on the host, between
// nh.to_host (codes to reals) and nh.from_host (the codes of the fake-quant, which stays on the
// host); each host op says why.

// CHECK-LABEL: func.func @product_in_the_middle
// CHECK:       %a = nh.relu %x
// CHECK-NEXT:  %[[F:.*]] = nh.to_host %a : tensor<?x4x3xi8, #nh.fixed<5, BCM>> -> tensor<?x4x3xf32>
// CHECK-NEXT:  %p = nf.reduce "prod" %[[F]] {nh.host = "multiplies codes together: {{.*}}", nh.host_kind = "op", dims = array<i64: 2>}
// CHECK-NEXT:  %pq = nq.fake_quant %p {bits = 8 : i64, exp = dense<2> : tensor<1xi8>}
// CHECK-NEXT:  %[[Q:.*]] = nh.from_host %pq {bits = 8 : i64} : tensor<?x4x1xf32> -> tensor<?x4x1xi8, #nh.fixed<2, BCM>>
// CHECK-NEXT:  %r = nh.relu %[[Q]]
// CHECK-NEXT:  func.return %r
// REFUSED: lower-to-hw: 'nf.reduce' (%p) multiplies codes together
func.func @product_in_the_middle(%x: tensor<?x4x3xf32>) -> tensor<?x4x1xf32> {
  %xq = nq.fake_quant %x {bits = 8 : i64, exp = dense<5> : tensor<1xi8>} : tensor<?x4x3xf32>
  %a = nf.relu %xq : tensor<?x4x3xf32>
  %p = nf.reduce "prod" %a {dims = array<i64: 2>} : tensor<?x4x3xf32> -> tensor<?x4x1xf32>
  %pq = nq.fake_quant %p {bits = 8 : i64, exp = dense<2> : tensor<1xi8>} : tensor<?x4x1xf32>
  %r = nf.relu %pq : tensor<?x4x1xf32>
  func.return %r : tensor<?x4x1xf32>
}

// -----

// An op that reads a host op's float result (no fake-quant between) joins its island; a
// fake-quant between two host ops stays on the host (no round trip through codes); an engine
// value a host op reads is its fake-quant again after nh.to_host (the identity on its grid, and
// the grid an op reading it from the IR finds). A division by a runtime value has no integer
// form.

// CHECK-LABEL: func.func @island_of_two
// CHECK:       %[[A0:.*]] = nh.to_host %x
// CHECK-NEXT:  %[[A:.*]] = nq.fake_quant %[[A0]] {bits = 8 : i64, exp = dense<5> : tensor<1xi8>}
// CHECK-NEXT:  %[[B0:.*]] = nh.to_host %y
// CHECK-NEXT:  %[[B:.*]] = nq.fake_quant %[[B0]] {bits = 8 : i64, exp = dense<5> : tensor<1xi8>}
// CHECK-NEXT:  %d = nf.div %[[A]], %[[B]] {nh.host = "divides by a runtime value{{.*}}"}
// CHECK-NEXT:  %n = nf.relu %d {nh.host = "reads the float result of the host op 'nf.div' (%d)", nh.host_kind = "host"}
// CHECK-NEXT:  %nq = nq.fake_quant %n
// CHECK-NEXT:  %m = nf.div %nq, %nq {nh.host = "divides{{.*}}", nh.host_kind = "shape"}
// REFUSED: lower-to-hw: 'nf.div' (%d) divides by a runtime value
func.func @island_of_two(%x: tensor<?x4xf32>, %y: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %xq = nq.fake_quant %x {bits = 8 : i64, exp = dense<5> : tensor<1xi8>} : tensor<?x4xf32>
  %yq = nq.fake_quant %y {bits = 8 : i64, exp = dense<5> : tensor<1xi8>} : tensor<?x4xf32>
  %d = nf.div %xq, %yq : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %n = nf.relu %d : tensor<?x4xf32>
  %nq = nq.fake_quant %n {bits = 8 : i64, exp = dense<3> : tensor<1xi8>} : tensor<?x4xf32>
  %m = nf.div %nq, %nq : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  func.return %m : tensor<?x4xf32>
}
